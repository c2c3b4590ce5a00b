"""`fencepost serve`, `fencepost send` and `fencepost echo-bench`: iperf3-shaped tools."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

from . import _core
from ._errors import OptionError
from ._options import add_arguments, given_options, normalize_options
from .net import _translate


def tool_options(args: argparse.Namespace, command: str) -> list:
    """The command's options as given, in the commands' notation (checked by the native module)."""
    return normalize_options(given_options(args, command))


def host_port(text: str, option: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise OptionError(option, f"{text!r} is not HOST:PORT (like 127.0.0.1:5201 or [::1]:5201)")
    return host.strip("[]"), int(port)


def _units(value: float, unit: str) -> str:
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if value >= scale:
            return f"{value / scale:6.2f} {prefix}{unit}"
    return f"{value:6.0f} {unit}"


def _bytes(n: float) -> str:
    for scale, prefix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if n >= scale:
            return f"{n / scale:7.2f} {prefix}Bytes"
    return f"{n:7.0f} Bytes"


def cmd_serve(args: argparse.Namespace) -> int:
    host, port = host_port(args.listen, "listen")
    try:
        server = _core.Server.start(host, port, args.echo, tool_options(args, "serve"))
    except (OSError, ValueError) as exc:
        raise _translate(exc) from None
    addr = server.local_addr()
    mode = "echo" if args.echo else "sink"
    print(f"fencepost serve: listening on {addr[0]}:{addr[1]} ({mode}); Ctrl-C stops", flush=True)
    key = server.public_key()
    if key is None:
        print("fencepost serve: plaintext packets (--insecure or the seed profile): nothing is encrypted or authenticated", flush=True)
    else:
        origin = f"from {args.opt_key}" if getattr(args, "opt_key", None) else "made for this run (keep one with `fencepost keygen` and --key)"
        print(f"fencepost serve: public key {key} ({origin}); clients pin it with --peer-key", flush=True)
    try:
        while True:
            for report in server.poll(0.5):
                r = json.loads(report)
                if args.json:
                    print(json.dumps(r), flush=True)
                    continue
                outcome = f"error: {r['error']}" if r["error"] else "ok"
                print(
                    f"[{r['remote']}] {mode}: {r['bytes']:,} bytes in {r['duration_s']:.2f} s "
                    f"({_units(r['goodput_bps'], 'bit/s').strip()}), sha256 {(r['sha256'][:16] + '...') if r['sha256'] else 'not computed (--no-verify)'}, "
                    f"packets sent {r['packets_sent']:,}, retransmissions {r['retransmissions']:,}; {outcome}",
                    flush=True,
                )
    except KeyboardInterrupt:
        s = server.endpoint_stats()
        server.shutdown()
        if args.json:
            print(json.dumps({"endpoint": s}), flush=True)
        print(f"\nfencepost serve: stopped; datagrams received {s['datagrams_received']:,} ({s['bytes_received']:,} bytes), "
              f"dropped: malformed {s['malformed']:,}, unknown connection {s['unknown_connection']:,}, wrong address {s['wrong_address']:,}, "
              f"wrong version {s['wrong_version']:,}, refused {s['refused']:,}, forged handshakes {s['forged_handshakes']:,}; "
              f"sent without a connection: {s['retries_sent']:,} retries and {s['stateless_resets_sent']:,} stateless resets "
              f"({s['stateless_bytes_sent']:,} bytes)", file=sys.stderr)
        return 0


def cmd_send(args: argparse.Namespace) -> int:
    host, port = host_port(args.target, "target")
    options = tool_options(args, "send")
    started = time.time()
    try:
        sender = _core.Sender.start(host, port, options)
    except (OSError, ValueError) as exc:
        raise _translate(exc) from None
    nbytes, seconds = sender.amount()
    given = dict(options)
    intervals = []
    if not args.json:
        what = given["bytes"] if nbytes is not None else f"for {given['time']}"
        print(f"Connecting to host {host}, port {port} (fencepost, sending {what})", flush=True)
        print("[ ID] Interval           Transfer     Bitrate           Retr   RTT       Cwnd", flush=True)
    summary = None
    try:
        while summary is None:
            try:
                reports, final = sender.poll(0.2)
            except (OSError, ValueError) as exc:
                raise _translate(exc) from None
            for report in reports:
                i = json.loads(report)
                intervals.append(i)
                if not args.json:
                    print(
                        f"[  1] {i['start']:6.2f}-{i['end']:<6.2f} sec {_bytes(i['bytes'])}  {_units(i['bits_per_second'], 'bits/sec')}"
                        f"  {i['retransmissions']:5d}  {i['rtt_ms']:6.2f} ms  {_bytes(i['cwnd']).strip()}",
                        flush=True,
                    )
            if final is not None:
                summary = json.loads(final)
    except KeyboardInterrupt:
        sender.cancel()
        print("fencepost send: interrupted", file=sys.stderr)
        return 130
    s = summary
    if args.json:
        print(json.dumps(iperf_shaped(host, port, started, nbytes, seconds, intervals, s), indent=2))
    else:
        print("- - - - - - - - - - - - - - - - - - - - - - - - -")
        print(f"[  1]   0.00-{s['duration_s']:<6.2f} sec {_bytes(s['bytes'])}  {_units(s['bits_per_second'], 'bits/sec')}  {s['retransmissions']:5d}   sender")
        if s["hashes_match"]:
            verdict = "SHA-256 match"
        elif s["complete"]:
            # Not hashed at one end or both (--no-verify): the count is what was checked.
            who = "this side" if not s["sha256"] else "the sink"
            verdict = f"byte count match (not hashed: --no-verify on {who})"
        elif not s["receiver_sha256"]:
            verdict = f"INCOMPLETE ({s['incomplete_reason']}; the sink acknowledged the bytes shown)"
        else:
            verdict = f"MISMATCH (sent {s['sha256'][:16]}..., received {s['receiver_sha256'][:16]}...)"
        print(f"[  1]   0.00-{s['duration_s']:<6.2f} sec {_bytes(s['receiver_bytes'])}  {_units(s['receiver_bytes'] * 8 / max(s['duration_s'], 1e-9), 'bits/sec')}          receiver  {verdict}")
        print(f"packets sent {s['packets_sent']:,} (data {s['data_packets_sent']:,}), acks received {s['acks_received']:,}, smoothed RTT {s['rtt_ms']:.3f} ms")
    return 0 if s["complete"] else 1


def iperf_shaped(host: str, port: int, started: float, nbytes, seconds, intervals: list, s: dict) -> dict:
    """The run as iperf3 --json lays it out (start, intervals, end), with fencepost's own fields added."""
    def stream(i: dict) -> dict:
        seconds_ = i["end"] - i["start"]
        return {"socket": 1, "start": i["start"], "end": i["end"], "seconds": seconds_, "bytes": i["bytes"],
                "bits_per_second": i["bits_per_second"], "retransmits": i["retransmissions"],
                "snd_cwnd": i["cwnd"], "rtt": int(i["rtt_ms"] * 1000), "bytes_in_flight": i["bytes_in_flight"]}

    return {
        "start": {
            "connected": [{"socket": 1, "remote_host": host, "remote_port": port}],
            "version": f"fencepost {_core.__version__}",
            "timestamp": {"timesecs": int(started), "time": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(started))},
            "test_start": {"protocol": "fencepost", "num_streams": 1, "bytes": nbytes or 0, "duration": seconds or 0},
        },
        "intervals": [{"streams": [stream(i)], "sum": {k: v for k, v in stream(i).items() if k not in ("socket", "snd_cwnd", "rtt", "bytes_in_flight")}} for i in intervals],
        "end": {
            "sum_sent": {"start": 0, "end": s["duration_s"], "seconds": s["duration_s"], "bytes": s["bytes"],
                         "bits_per_second": s["bits_per_second"], "retransmits": s["retransmissions"]},
            "sum_received": {"start": 0, "end": s["duration_s"], "seconds": s["duration_s"], "bytes": s["receiver_bytes"],
                             "bits_per_second": s["receiver_bytes"] * 8 / max(s["duration_s"], 1e-9)},
            "fencepost": {k: s[k] for k in ("sha256", "receiver_sha256", "hashes_match", "verified", "complete", "incomplete_reason", "packets_sent", "data_packets_sent", "acks_received", "rtt_ms", "connect_started_unix")},
        },
    }


def cmd_echo_bench(args: argparse.Namespace) -> int:
    host, port = host_port(args.target, "target")
    try:
        text = _core.echo_bench(host, port, tool_options(args, "echo-bench"))
    except (OSError, ValueError) as exc:
        raise _translate(exc) from None
    r = json.loads(text)
    verdict = "echo verified by SHA-256" if r["hashes_match"] else "ECHO MISMATCH"
    print(f"{r['messages']} messages, {r['bytes']:,} bytes echoed in {r['time_to_completion_s']:.2f} s; "
          f"packets sent {r['packets_sent']:,} (retransmissions {r['retransmissions']:,}); {verdict}")
    if args.results:
        # The article's results file: condition -> list of [packets sent, seconds to completion].
        results = {}
        if os.path.exists(args.results):
            try:
                with open(args.results, encoding="utf-8") as f:
                    results = json.load(f)
            except (OSError, json.JSONDecodeError) as exc:
                raise OptionError("results", f"{args.results} exists but is not a results JSON file: {exc}") from None
        results.setdefault(args.condition, []).append([r["packets_sent"], r["time_to_completion_s"]])
        tmp = args.results + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=4)
        os.replace(tmp, args.results)
        print(f"appended to {args.results} under {args.condition!r} ({len(results[args.condition])} runs)")
    return 0 if r["hashes_match"] else 1


def cmd_keygen(args: argparse.Namespace) -> int:
    private, public = _core.keygen()
    if args.out == "-":
        print(private)
    else:
        if os.path.exists(args.out) and not args.force:
            raise OptionError("out", f"{args.out} exists; give --force to replace it, or another file")
        # The private key is readable by its owner alone.
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"# fencepost private key; public key {public}\n{private}\n")
        print(f"wrote the private key to {args.out} (mode 600); serve it with: fencepost serve --key {args.out}", file=sys.stderr)
    print(f"public key: {public}", file=sys.stderr if args.out == "-" else sys.stdout)
    return 0


def cmd_trace(args) -> int:
    from . import _traces
    from ._errors import option_error_from_native

    if args.trace_command == "list":
        for name, path in _traces.shipped().items():
            t = _traces.info(path)
            print(f"{name:32} {t.mean_bps / 1e6:8.3f} Mbit/s mean, period {t.period_ms / 1000:7.3f} s")
        print(f"(in {_traces.SHIPPED_DIR}; origins in its README.md)")
        return 0
    if args.trace_command == "info":
        print(_traces.info(args.trace).text())
        return 0
    # generate: the rate and length through the options' unit parsers.
    try:
        bps = _core.parse_unit("rate", "rate", args.rate)
        micros = _core.parse_unit("duration", "duration", args.duration)
    except ValueError as exc:
        raise option_error_from_native(exc) from None
    if bps < 12_032 and args.kind == "constant":
        raise OptionError("rate", f"{args.rate} is below one {_traces.OPPORTUNITY_BYTES}-byte chance a second (12032bit), the slowest constant trace")
    if bps == 0 or micros < 1000:
        raise OptionError("rate" if bps == 0 else "duration", "must be above zero (a duration of at least 1ms)")
    text = _core.generate_trace(args.kind, bps, micros // 1000, args.seed)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        print(_traces.info(args.out).text())
    return 0


def add_parsers(subparsers) -> None:
    p = subparsers.add_parser("trace", help="bandwidth traces: list the shipped ones, summarise one, generate one",
                              description="mahimahi-format bandwidth traces (one line per 1504-byte delivery chance, in ms). "
                                          "--trace accepts a path or the name of a shipped trace.")
    sub = p.add_subparsers(dest="trace_command", metavar="list|info|generate")
    sub.required = True
    sub.add_parser("list", help="the traces that ship with fencepost, with their mean capacity")
    q = sub.add_parser("info", help="a trace's period, mean capacity and its spread over 100 ms windows")
    q.add_argument("trace", metavar="FILE|NAME", help="a trace file, or a shipped trace's name (see `fencepost trace list`)")
    q = sub.add_parser("generate", help="write a constant-rate or Poisson trace")
    q.add_argument("kind", choices=["constant", "poisson"], help="constant: evenly spaced chances; poisson: chances at exponential gaps")
    q.add_argument("--rate", required=True, metavar="RATE", help="mean capacity, e.g. 12mbit, 2.64mbit")
    q.add_argument("--duration", default="60s", metavar="DURATION", help="the trace's period for poisson (default 60s; the trace repeats after it)")
    q.add_argument("--seed", type=int, default=1, metavar="N", help="poisson: the random seed (default 1)")
    q.add_argument("--out", required=True, metavar="FILE", help="where to write it (- for standard output)")
    p.set_defaults(handler=cmd_trace)

    p = subparsers.add_parser("keygen", help="make a server key pair for protected connections",
                              description="Make a static key pair for `fencepost serve --key FILE`. The public key, printed, is what "
                                          "clients give as --peer-key (Python: peer_key=) to connect only to this server.")
    p.add_argument("--out", metavar="FILE", default="fencepost.key", help="where to write the private key (default fencepost.key; - for standard output)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.set_defaults(handler=cmd_keygen)

    p = subparsers.add_parser("serve", help="accept fencepost connections: a sink (default) or an echo",
                              description="Accept fencepost connections. As a sink, answer each with the SHA-256 of what arrived; with --echo, send everything back.")
    p.add_argument("--listen", metavar="HOST:PORT", default="0.0.0.0:5201", help="address to listen on (default 0.0.0.0:5201)")
    p.add_argument("--echo", action="store_true", help="echo every byte back instead of sinking it")
    p.add_argument("--json", action="store_true", help="one JSON line per finished connection, and the endpoint's counters when stopped")
    add_arguments(p, "serve")
    p.set_defaults(handler=cmd_serve)

    p = subparsers.add_parser("send", help="send bytes to a fencepost serve, iperf3-style",
                              description="Send bytes to a `fencepost serve` sink, print per-interval lines and a summary, and check the receiver's SHA-256 against the sender's.")
    p.add_argument("target", metavar="HOST:PORT")
    p.add_argument("--json", action="store_true", help="iperf3-shaped JSON (start, intervals, end)")
    add_arguments(p, "send")
    p.set_defaults(handler=cmd_send)

    p = subparsers.add_parser("echo-bench", help="the seed article's echo benchmark client",
                              description="Send 1000 random messages of 200-400 bytes, 2-20 ms apart, to a `fencepost serve --echo`; verify the echo by SHA-256; report packets sent and time to completion; append them to a results JSON keyed by condition.")
    p.add_argument("target", metavar="HOST:PORT")
    p.add_argument("--condition", metavar="NAME", required=True, help="the key the result is stored under (like a drop rate)")
    p.add_argument("--results", metavar="FILE", default="results.json", help="results file to append to (default results.json; '' to skip)")
    add_arguments(p, "echo-bench")
    p.set_defaults(handler=cmd_echo_bench)
