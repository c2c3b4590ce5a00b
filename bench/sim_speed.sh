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
# Usage: bash bench/sim_speed.sh [BYTES] [OPTION=VALUE ...], e.g. 100MB cc=bbr real-cipher=true
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p fencepost-sim --example sim_speed
exec ./target/release/examples/sim_speed "${1:-100MB}" "${@:2}"
