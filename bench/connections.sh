#!/usr/bin/env bash
# How one `fencepost serve --echo` copes with many connections: time per
# connection to open 500, 2,000 and 8,000 (each echoes one message), and the
# server's CPU while 1,000 and 5,000 connections sit idle.
# Targets: time per connection at 8,000 within 2x of that at 500; idle CPU at 5,000 <= 1 % of a core.
set -euo pipefail
cd "$(dirname "$0")/.."
FP=.venv/bin/fencepost
[ -x "$FP" ] || { echo "run 'make build' first" >&2; exit 2; }
cargo build --release --quiet -p fencepost-net --example connections
CLIENT=./target/release/examples/connections
IDLE_SECONDS=${IDLE_SECONDS:-10}
SERVE_PID=""
cleanup() { [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null || true; }
trap cleanup EXIT

start_serve() {
    PORT=$((20000 + RANDOM % 20000))
    setsid "$FP" serve --echo --listen 127.0.0.1:$PORT >/dev/null 2>&1 & SERVE_PID=$!
    for _ in $(seq 50); do
        ss -uln 2>/dev/null | grep -q ":$PORT " && return 0
        sleep 0.1
    done
    sleep 1
}
stop_serve() { kill "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true; SERVE_PID=""; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "opening connections to one fencepost serve --echo (each echoes one message)"
declare -A per
for n in 500 2000 8000; do
    start_serve
    # All of the client's output, then its first line: through `head -1` the client's
    # next line could meet a closed pipe, and the client's panic ended the script.
    output=$("$CLIENT" "127.0.0.1:$PORT" "$n" 0)
    line=$(head -1 <<<"$output")
    stop_serve
    us=$(sed -E 's/.*\(([0-9.]+) us per connection.*/\1/' <<<"$line")
    per[$n]=$us
    printf "  %5d connections: %s\n" "$n" "$line"
done
python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'  time per connection at 8000 / at 500 = {b/a:.2f} (target <= 2): {\"met\" if b/a <= 2 else \"NOT met\"}')" "${per[500]}" "${per[8000]}"

echo "server CPU while connections sit idle (${IDLE_SECONDS} s, after they settle)"
declare -A cpu
HZ=$(getconf CLK_TCK)
for n in 1000 5000; do
    start_serve
    out=$(mktemp)
    "$CLIENT" "127.0.0.1:$PORT" "$n" $((IDLE_SECONDS + 8)) >"$out" & CLIENT_PID=$!
    until grep -q idle "$out"; do sleep 0.2; kill -0 $CLIENT_PID 2>/dev/null || { cat "$out"; exit 1; }; done
    sleep 5
    t0=$(cpu_ticks "$SERVE_PID")
    sleep "$IDLE_SECONDS"
    t1=$(cpu_ticks "$SERVE_PID")
    wait $CLIENT_PID || true
    stop_serve
    rm -f "$out"
    cpu[$n]=$(python3 -c "print(($t1 - $t0) / $HZ / $IDLE_SECONDS * 100)")
    printf "  %5d idle connections: server CPU %.2f %% of a core\n" "$n" "${cpu[$n]}"
done
python3 - "${cpu[1000]}" "${cpu[5000]}" "$HZ" "$IDLE_SECONDS" <<'PY'
import sys
a, b, hz, seconds = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
resolution = 100 / hz / seconds  # one clock tick over the window, in % of a core
ratio = f"{b / a:.1f}x" if a > 0 else f"n/a (1000 idle connections used less than one {1000 / hz:.0f} ms tick)"
print(f"  idle CPU at 5000 = {b:.2f} % of a core (target <= 1 %, resolution {resolution:.2f} %): {'met' if b <= 1 else 'NOT met'}; 5000 / 1000 = {ratio}")
PY
