#!/usr/bin/env bash
# What packet protection costs on loopback, measured in one run: fencepost with
# AES-256-GCM, with ChaCha20-Poly1305 and in plaintext (--insecure), 1 GB each, three
# rounds interleaved so the machine's noise falls on all alike; medians and the ratio
# protected / plaintext (target >= 0.8). Then handshakes per second
# (crates/fencepost-net/examples/handshakes.rs). `bash bench/protection.sh [BYTES] [ROUNDS]`
set -euo pipefail
cd "$(dirname "$0")/.."
BYTES=${1:-1GB}
ROUNDS=${2:-3}
FP=.venv/bin/fencepost
[ -x "$FP" ] || { echo "run 'make build' first" >&2; exit 2; }
PORT_P=$((20000 + RANDOM % 10000)); PORT_I=$((PORT_P + 1))
cleanup() { kill "${P_PID:-}" "${I_PID:-}" 2>/dev/null || true; }
trap cleanup EXIT
setsid "$FP" serve --listen 127.0.0.1:$PORT_P >/dev/null 2>&1 & P_PID=$!
setsid "$FP" serve --listen 127.0.0.1:$PORT_I --insecure >/dev/null 2>&1 & I_PID=$!
sleep 1
rate() { # PORT ARGS... -> bit/s at the receiver, or "failed"
    local port=$1; shift
    "$FP" send 127.0.0.1:"$port" --bytes "$BYTES" --json "$@" | python3 -c 'import json,sys; e=json.load(sys.stdin)["end"]; print(e["sum_received"]["bits_per_second"] if e["fencepost"]["hashes_match"] else "failed")'
}
declare -a aes chacha plain
for _ in $(seq "$ROUNDS"); do
    aes+=("$(rate $PORT_P --cipher aes-256-gcm)")
    chacha+=("$(rate $PORT_P --cipher chacha20-poly1305)")
    plain+=("$(rate $PORT_I --insecure)")
done
python3 - "${aes[*]}" "${chacha[*]}" "${plain[*]}" <<'PY'
import statistics, sys
def runs(text):
    ok = [float(x) for x in text.split() if x != "failed"]
    return ok, text.split().count("failed")
rows = {name: runs(arg) for name, arg in zip(["AES-256-GCM", "ChaCha20-Poly1305", "plaintext (--insecure)"], sys.argv[1:])}
plain = statistics.median(rows["plaintext (--insecure)"][0])
print("loopback, 1 connection, SHA-256 checked; Gbit/s at the receiver: median [min-max] of the rounds")
for name, (ok, failed) in rows.items():
    med = statistics.median(ok)
    print(f"  {name:<24} {med / 1e9:6.2f} [{min(ok) / 1e9:.2f}-{max(ok) / 1e9:.2f}]  ratio to plaintext {med / plain:.2f}" + (f"  ({failed} failed)" if failed else ""))
best = max(statistics.median(rows[n][0]) for n in ("AES-256-GCM", "ChaCha20-Poly1305")) / plain
print(f"  target: protected >= 0.8 x plaintext: {'met' if statistics.median(rows['AES-256-GCM'][0]) / plain >= 0.8 else 'NOT met'} (default cipher AES-256-GCM)")
PY
cargo run --release --quiet -p fencepost-net --example handshakes 3000
