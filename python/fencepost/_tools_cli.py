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


# iperf3's notation, for its short flags: seconds as bare numbers, K/M/G sizes in binary
# units (-n), K/M/G rates in bits per second (-b).
def _iperf_seconds(text: str) -> str:
    return f"{text}s" if text.replace(".", "", 1).isdigit() else text


def _iperf_bytes(text: str) -> str:
    if text[-1:] in "KMGTkmgt" and text[:-1].replace(".", "", 1).isdigit():
        return text[:-1] + text[-1].upper() + "iB"
    return text


def _iperf_rate(text: str) -> str:
    if text[-1:] in "KMGkmg" and text[:-1].replace(".", "", 1).isdigit():
        return text[:-1] + text[-1].lower() + "bit"
    return f"{text}bit" if text.replace(".", "", 1).isdigit() else text


def send_target(args: argparse.Namespace) -> tuple[str, int]:
    """HOST:PORT, or iperf3's -c HOST [-p PORT]."""
    if args.target and args.client:
        raise OptionError("client", "give the server either as HOST:PORT or with -c HOST [-p PORT], not both")
    if args.target:
        if args.port is not None:
            raise OptionError("port", "-p goes with -c HOST; HOST:PORT already names the port")
        return host_port(args.target, "target")
    if args.client:
        return args.client.strip("[]"), args.port if args.port is not None else 5201
    raise OptionError("target", "which server? give HOST:PORT or -c HOST [-p PORT]")


def cmd_serve(args: argparse.Namespace) -> int:
    if args.address and args.listen:
        raise OptionError("listen", "give the address to listen on either as HOST:PORT or with --listen, not both")
    host, port = host_port(args.address or args.listen or "0.0.0.0:5201", "listen")
    if args.port is not None:
        port = args.port
    try:
        server = _core.Server.start(host, port, args.echo, tool_options(args, "serve"))
    except (OSError, ValueError) as exc:
        raise _translate(exc) from None
    addr = server.local_addr()
    mode = "echo" if args.echo else "sink"
    print(f"fencepost serve: listening on {addr[0]}:{addr[1]} ({mode}); Ctrl-C (or SIGTERM) stops", flush=True)
    warning = server.receive_buffer_warning()
    if warning:
        print(f"fencepost serve: warning: {warning}", file=sys.stderr, flush=True)
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
                if r.get("final_ack_missing"):
                    outcome += " (the client's final ack never came: lost as it exited, most likely)"
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
        kernel = s.get("socket_receive_drops")
        print(f"\nfencepost serve: stopped; datagrams received {s['datagrams_received']:,} ({s['bytes_received']:,} bytes), "
              f"dropped: malformed {s['malformed']:,}, unknown connection {s['unknown_connection']:,}, wrong address {s['wrong_address']:,}, "
              f"wrong version {s['wrong_version']:,}, refused {s['refused']:,}, forged handshakes {s['forged_handshakes']:,}, "
              f"Initials shed in a flood {s['initials_shed']:,}"
              + (f", by this host's kernel at the socket (a full receive buffer, mostly; GRO may have merged several datagrams into one) {kernel:,}"
                 f" (receiving connections' windows held after {s.get('socket_overflows', 0):,} such overflows,"
                 f" and {s.get('socket_fill_holds', 0):,} times as the socket came near full)"
                 if kernel is not None else "")
              + f"; sent without a connection: {s['retries_sent']:,} retries and {s['stateless_resets_sent']:,} stateless resets "
              f"({s['stateless_bytes_sent']:,} bytes); peers followed to a new address {s.get('peer_address_changes', 0):,}; "
              f"destinations reported unreachable (ICMP errors, sends with no route) {s.get('unreachable_reports', 0):,}", file=sys.stderr)
        return 0


def cmd_send(args: argparse.Namespace) -> int:
    host, port = send_target(args)
    options = tool_options(args, "send")
    started = time.time()
    try:
        sender = _core.Sender.start(host, port, options)
    except (OSError, ValueError) as exc:
        raise _translate(exc) from None
    nbytes, seconds = sender.amount()
    given = dict(options)
    parallel = int(given.get("parallel", 1))
    reverse = given.get("reverse", "false") == "true"
    warning = sender.receive_buffer_warning()
    if reverse and warning:
        # Only the stream coming back is at the mercy of this socket's buffer.
        print(f"fencepost send: warning: {warning}", file=sys.stderr, flush=True)
    intervals = []
    if not args.json:
        what = given["bytes"] if nbytes is not None else f"for {given['time']}"
        way = "receiving from the server (reverse)" if reverse else "sending"
        streams = f", {parallel} streams" if parallel > 1 else ""
        print(f"Connecting to host {host}, port {port} (fencepost, {way} {what}{streams}); intervals measured at the receiver", flush=True)
        print("[ ID] Interval           Transfer     Bitrate           Retr   RTT       Cwnd", flush=True)
    summaries = None
    pending_sum: dict = {}
    try:
        while summaries is None:
            try:
                reports, final = sender.poll(0.2)
            except (OSError, ValueError) as exc:
                raise _translate(exc) from None
            for report in reports:
                i = json.loads(report)
                intervals.append(i)
                if not args.json:
                    print(
                        f"[{i['stream']:3d}] {i['start']:6.2f}-{i['end']:<6.2f} sec {_bytes(i['bytes'])}  {_units(i['bits_per_second'], 'bits/sec')}"
                        f"  {i['retransmissions']:5d}  {i['rtt_ms']:6.2f} ms  {_bytes(i['cwnd']).strip()}",
                        flush=True,
                    )
                    if parallel > 1:
                        # The sum line once every stream has reported this interval.
                        k = sum(1 for x in intervals if x["stream"] == i["stream"])
                        pending_sum.setdefault(k, []).append(i)
                        if len(pending_sum[k]) == parallel:
                            group = pending_sum.pop(k)
                            start, end = min(x["start"] for x in group), max(x["end"] for x in group)
                            total = sum(x["bytes"] for x in group)
                            print(f"[SUM] {start:6.2f}-{end:<6.2f} sec {_bytes(total)}  {_units(total * 8 / max(end - start, 1e-9), 'bits/sec')}"
                                  f"  {sum(x['retransmissions'] for x in group):5d}", flush=True)
            if final is not None:
                summaries = json.loads(final)
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM: the connections are closed here; main() says which and exits
        # with its code.
        sender.cancel()
        raise
    complete = all(s["complete"] for s in summaries)
    if args.json:
        print(json.dumps(iperf_shaped(host, port, started, nbytes, seconds, reverse, intervals, summaries), indent=2))
        return 0 if complete else 1
    print("- - - - - - - - - - - - - - - - - - - - - - - - -")
    for s in summaries:
        retr = "    -" if s["reverse"] else f"{s['retransmissions']:5d}"
        print(f"[{s['stream']:3d}]   0.00-{s['sender_seconds']:<6.2f} sec {_bytes(s['bytes'])}  {_units(s['bytes'] * 8 / max(s['sender_seconds'], 1e-9), 'bits/sec')}  {retr}   sender")
        print(f"[{s['stream']:3d}]   0.00-{_receiver_seconds(s):<6.2f} sec {_bytes(s['receiver_bytes'])}  "
              f"{_units(s['receiver_bytes'] * 8 / max(_receiver_seconds(s), 1e-9), 'bits/sec')}          receiver  {_verdict(s)}")
    if parallel > 1:
        sent, got = sum(s["bytes"] for s in summaries), sum(s["receiver_bytes"] for s in summaries)
        ts, tr = max(s["sender_seconds"] for s in summaries), max(_receiver_seconds(s) for s in summaries)
        print(f"[SUM]   0.00-{ts:<6.2f} sec {_bytes(sent)}  {_units(sent * 8 / max(ts, 1e-9), 'bits/sec')}  {sum(s['retransmissions'] for s in summaries):5d}   sender")
        print(f"[SUM]   0.00-{tr:<6.2f} sec {_bytes(got)}  {_units(got * 8 / max(tr, 1e-9), 'bits/sec')}          receiver  "
              f"{'all streams complete' if complete else 'NOT ALL STREAMS COMPLETE'}")
    for s in summaries:
        mean = s.get("rtt_mean_ms")
        print(f"[{s['stream']:3d}] packets sent {s['packets_sent']:,} (data {s['data_packets_sent']:,}), acks received {s['acks_received']:,}, "
              f"RTT mean {f'{mean:.3f} ms' if mean is not None else '-'}, smoothed at the end {s['rtt_ms']:.3f} ms")
    return 0 if complete else 1


def _receiver_seconds(s: dict) -> float:
    # A transfer that arrived in one read has no span of its own: its stream's time stands in.
    return s["receiver_seconds"] if s["receiver_seconds"] > 0 else s["duration_s"]


def _verdict(s: dict) -> str:
    if s["hashes_match"]:
        return "SHA-256 match"
    if s["complete"]:
        # Not hashed at one end or both (--no-verify): the count is what was checked.
        who = "this side" if not s["sha256"] else "the sink"
        return f"byte count match (not hashed: --no-verify on {who})"
    if not s["receiver_sha256"]:
        return f"INCOMPLETE ({s['incomplete_reason']}; the sink acknowledged the bytes shown)"
    return f"MISMATCH (sent {s['sha256'][:16]}..., received {s['receiver_sha256'][:16]}...)"


def iperf_shaped(host: str, port: int, started: float, nbytes, seconds, reverse: bool, intervals: list, summaries: list) -> dict:
    """The run as iperf3 --json lays it out (start, intervals, end with streams, sum_sent and
    sum_received), with fencepost's own fields under end.fencepost. Intervals are the
    receiver's measurements (the sink's reports, or this side's in reverse)."""
    def interval_entry(i: dict) -> dict:
        return {"socket": i["stream"], "start": i["start"], "end": i["end"], "seconds": i["end"] - i["start"], "bytes": i["bytes"],
                "bits_per_second": i["bits_per_second"], "retransmits": i["retransmissions"], "snd_cwnd": i["cwnd"],
                "rtt": int(i["rtt_ms"] * 1000), "bytes_in_flight": i["bytes_in_flight"], "omitted": False, "sender": False}

    def total(entries: list, sender: bool) -> dict:
        start, end = min(e["start"] for e in entries), max(e["end"] for e in entries)
        nbytes_ = sum(e["bytes"] for e in entries)
        out = {"start": start, "end": end, "seconds": end - start, "bytes": nbytes_, "bits_per_second": nbytes_ * 8 / max(end - start, 1e-9),
               "omitted": False, "sender": sender}
        if all("retransmits" in e for e in entries):
            out["retransmits"] = sum(e["retransmits"] for e in entries)
        return out

    per_stream: dict = {}
    for i in intervals:
        per_stream.setdefault(i["stream"], []).append(interval_entry(i))
    rounds = max((len(v) for v in per_stream.values()), default=0)
    shaped_intervals = []
    for k in range(rounds):
        entries = [v[k] for _, v in sorted(per_stream.items()) if k < len(v)]
        shaped_intervals.append({"streams": entries, "sum": total(entries, False)})
    streams, sent_entries, received_entries = [], [], []
    for s in summaries:
        sender = {"socket": s["stream"], "start": 0, "end": s["sender_seconds"], "seconds": s["sender_seconds"], "bytes": s["bytes"],
                  "bits_per_second": s["bytes"] * 8 / max(s["sender_seconds"], 1e-9), "sender": True}
        if not s["reverse"]:
            sender["retransmits"] = s["retransmissions"]
        rs = _receiver_seconds(s)
        receiver = {"socket": s["stream"], "start": 0, "end": rs, "seconds": rs, "bytes": s["receiver_bytes"],
                    "bits_per_second": s["receiver_bytes"] * 8 / max(rs, 1e-9), "sender": False}
        streams.append({"sender": sender, "receiver": receiver})
        sent_entries.append(sender)
        received_entries.append(receiver)
    first = summaries[0]
    fencepost = {
        "sha256": first["sha256"], "receiver_sha256": first["receiver_sha256"],
        "hashes_match": all(s["hashes_match"] for s in summaries), "verified": all(s["verified"] for s in summaries),
        "complete": all(s["complete"] for s in summaries),
        "incomplete_reason": next((f"stream {s['stream']}: {s['incomplete_reason']}" if len(summaries) > 1 else s["incomplete_reason"]
                                   for s in summaries if not s["complete"]), None),
        "packets_sent": sum(s["packets_sent"] for s in summaries), "data_packets_sent": sum(s["data_packets_sent"] for s in summaries),
        "acks_received": sum(s["acks_received"] for s in summaries), "rtt_ms": first["rtt_ms"], "rtt_mean_ms": first.get("rtt_mean_ms"),
        "connect_started_unix": min(s["connect_started_unix"] for s in summaries),
        "streams": summaries,
    }
    return {
        "start": {
            "connected": [{"socket": s["stream"], "remote_host": host, "remote_port": port} for s in summaries],
            "version": f"fencepost {_core.__version__}",
            "timestamp": {"timesecs": int(started), "time": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(started))},
            "connecting_to": {"host": host, "port": port},
            "test_start": {"protocol": "fencepost", "num_streams": len(summaries), "bytes": nbytes or 0, "duration": seconds or 0,
                           "reverse": int(reverse)},
        },
        "intervals": shaped_intervals,
        "end": {
            "streams": streams,
            "sum_sent": total(sent_entries, True),
            "sum_received": total(received_entries, False),
            "fencepost": fencepost,
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
    p.add_argument("address", metavar="HOST:PORT", nargs="?", help="address to listen on, as --listen (default 0.0.0.0:5201)")
    p.add_argument("--listen", metavar="HOST:PORT", help="address to listen on (default 0.0.0.0:5201)")
    p.add_argument("-s", "--server", action="store_true", help="iperf3's server flag; serving is what this command does")
    p.add_argument("-p", "--port", type=int, metavar="PORT", help="the port to listen on (iperf3's -p; replaces --listen's)")
    p.add_argument("--echo", action="store_true", help="echo every byte back instead of sinking it")
    p.add_argument("--json", action="store_true", help="one JSON line per finished connection, and the endpoint's counters when stopped")
    add_arguments(p, "serve")
    p.set_defaults(handler=cmd_serve)

    p = subparsers.add_parser("send", help="send bytes to a fencepost serve, iperf3-style",
                              description="Send bytes to a `fencepost serve` sink (or, with -R, from it), print per-interval lines measured at "
                                          "the receiver and a summary, and check the receiver's SHA-256 against the sender's. iperf3's short "
                                          "flags work as in iperf3: -c HOST -p PORT -t SECONDS -n BYTES (K/M/G binary) -i SECONDS -J -R -P N "
                                          "-b RATE (K/M/G bits per second). With --time, what was written when the time is up is still "
                                          "delivered as long as new packets keep being acknowledged: the run reports INCOMPLETE once none "
                                          "were for as long as the writing time (2 to 10 s), or after six times that in all.")
    p.add_argument("target", metavar="HOST:PORT", nargs="?", help="the server (or -c HOST -p PORT)")
    p.add_argument("-c", "--client", metavar="HOST", help="the server's host (iperf3's -c)")
    p.add_argument("-p", "--port", type=int, metavar="PORT", help="the server's port with -c (default 5201)")
    p.add_argument("-J", "--json", action="store_true", help="iperf3-shaped JSON (start, intervals, end with streams, sum_sent, sum_received)")
    p.add_argument("-t", dest="opt_time", type=_iperf_seconds, metavar="SECONDS", help="as --time: send for this long (iperf3's -t)")
    p.add_argument("-n", dest="opt_bytes", type=_iperf_bytes, metavar="BYTES", help="as --bytes, with iperf3's K/M/G = 1024^n (iperf3's -n)")
    p.add_argument("-i", dest="opt_interval", type=_iperf_seconds, metavar="SECONDS", help="as --interval (iperf3's -i)")
    p.add_argument("-R", dest="opt_reverse", action="store_const", const="true", help="as --reverse: the server sends (iperf3's -R)")
    p.add_argument("-P", dest="opt_parallel", metavar="N", help="as --parallel: N streams at once (iperf3's -P)")
    p.add_argument("-b", dest="opt_bitrate", type=_iperf_rate, metavar="RATE", help="as --bitrate, with iperf3's K/M/G bits per second (iperf3's -b)")
    add_arguments(p, "send")
    p.set_defaults(handler=cmd_send)

    p = subparsers.add_parser("echo-bench", help="the seed article's echo benchmark client",
                              description="Send 1000 random messages of 200-400 bytes, 2-20 ms apart, to a `fencepost serve --echo`; verify the echo by SHA-256; report packets sent and time to completion; append them to a results JSON keyed by condition.")
    p.add_argument("target", metavar="HOST:PORT")
    p.add_argument("--condition", metavar="NAME", required=True, help="the key the result is stored under (like a drop rate)")
    p.add_argument("--results", metavar="FILE", default="results.json", help="results file to append to (default results.json; '' to skip)")
    add_arguments(p, "echo-bench")
    p.set_defaults(handler=cmd_echo_bench)
