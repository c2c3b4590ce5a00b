#!/usr/bin/env bash
# Simulated seconds per wall-clock second for a 100 MB bulk transfer over
# 100 Mbit/s, 20 ms, 1 % loss. Target (issue 12): at least 150x for the controllers
# that fill the link; measured 70-88x on a quiet machine (2026-11-24; 50-55x with real-cipher=true),
# 93-96x for tolerant since the bulk stream is generated into packets (write_generated, 2026-11-25).
# parallel=true runs each on two threads (Simulation::parallel, the same report): tolerant
# 158-163x, bbr 169-176x in three full runs in a quiet spell (2026-11-25), 81-107x in a busy one;
# the last column is the share of the run on two threads.
# One thread after the changes in docs/simulation.md ("One run on two threads", 2026-11-25, same reports):
# tolerant 152-155x, bbr 163-164x, none:window=512 181-189x, tolerant with real-cipher=true 95x;
# two threads tolerant 165-185x, bbr 169-193x (three full runs each, a quiet spell).
# 2026-11-27: tolerant 143-152x on one thread, 247-278x on two; bbr 159-164x, 239-260x.
# Later that day, with whole-program LTO and the payload made and checked with AVX2:
# tolerant 154-159x on one thread, 274x on two; bbr 163x and 279x.
# 2026-12-02: runs step through windows by default, the two sides in turn on one thread
# (docs/simulation.md, "Windows in turn"); mode=instants is the one-thread loop before that.
# Each line is the median of reps=N runs (default 3), with the slowest and fastest beside it.
# Usage: bash bench/sim_speed.sh [BYTES] [OPTION=VALUE ...], e.g. 100MB cc=bbr real-cipher=true
# With no options it runs every controller three ways, interleaved: every instant on one
# thread (instants), windows in turn on one thread (the default), windows on two (threads).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p fencepost-sim --example sim_speed
if [ $# -le 1 ]; then
    exec ./target/release/examples/sim_speed "${1:-100MB}" mode=instants,windows,threads
fi
exec ./target/release/examples/sim_speed "${1:-100MB}" "${@:2}"
