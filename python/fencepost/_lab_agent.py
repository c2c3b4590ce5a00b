"""The lab's processes inside network namespaces: ``python -m fencepost._lab_agent
emulate|tcp-sink|tcp-send|echo ...``. Each writes ``fencepost-lab: ready`` to stderr
once it listens, its JSON account to stdout when done, and treats SIGTERM like
Ctrl-C: it stops and still reports."""

from __future__ import annotations

import argparse
import json
import signal
import sys

from . import _core


def _stop_on_sigterm() -> None:
    def stop(signum, frame):  # noqa: ARG001 - signal handler signature
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fencepost._lab_agent")
    sub = p.add_subparsers(dest="what", required=True)
    e = sub.add_parser("emulate")
    e.add_argument("--up-in", required=True)
    e.add_argument("--down-in", required=True)
    e.add_argument("--seed", type=int, required=True)
    e.add_argument("--log")
    e.add_argument("--options", required=True, help="JSON list of [option, value] pairs")
    s = sub.add_parser("tcp-sink")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int, required=True)
    c = sub.add_parser("tcp-send")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--cc", required=True)
    c.add_argument("--bytes", type=int)
    c.add_argument("--seconds", type=float, default=10.0)
    c.add_argument("--sample-ms", type=float, default=10.0)
    m = sub.add_parser("echo")
    m.add_argument("--host", required=True)
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--options", default="[]", help="JSON list of [option, value] pairs for echo-bench")
    args = p.parse_args(argv)
    _stop_on_sigterm()
    try:
        if args.what == "emulate":
            pairs = [tuple(pair) for pair in json.loads(args.options)]
            print(_core.lab_emulate(args.up_in, args.down_in, pairs, args.seed, args.log), flush=True)
        elif args.what == "tcp-sink":
            _core.lab_tcp_sink(args.host, args.port)
        elif args.what == "echo":
            pairs = [tuple(pair) for pair in json.loads(args.options)]
            print(_core.echo_bench(args.host, args.port, pairs), flush=True)
        else:
            print(_core.lab_tcp_send(args.host, args.port, args.cc, args.bytes, args.seconds, args.sample_ms), flush=True)
    except (OSError, ValueError) as exc:
        print(f"fencepost-lab: {args.what}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
