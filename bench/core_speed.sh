#!/usr/bin/env bash
# The protocol core's own cost per data datagram over 1 and over many connections: a client
# and a server endpoint joined in memory (no sockets, threads or wake-ups), so the figures
# are the core's alone and vary little from run to run (docs/speed.md, "Many connections
# to one server"). 2026-11-27: 100 connections 1.07-1.14x one connection's cost, 1,000
# connections 2.0x (the server's receive path, on per-connection state out of the caches;
# 1.75x once the connections shared their spare receive buffers).
# Usage: bash bench/core_speed.sh [BYTES e.g. 400MB] [CONNECTIONS...] [reps=N]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p fencepost-proto --example core_speed
if [ $# -eq 0 ]; then
    exec ./target/release/examples/core_speed 400MB 1 10 100 1000
fi
exec ./target/release/examples/core_speed "$@"
