#!/usr/bin/env bash
# fencepost, kernel TCP (iperf3) and plain UDP (iperf3 -u) on loopback, in one run.
# Target: fencepost >= 1 Gbit/s on this 2-core machine; prints the ratios to TCP and UDP.
# Installs iperf3 from Debian's packages if it is missing (needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
BYTES=${1:-1GB}
FP=.venv/bin/fencepost
[ -x "$FP" ] || { echo "run 'make build' first" >&2; exit 2; }
if ! command -v iperf3 >/dev/null; then
    echo "installing iperf3 ..." >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3) >/dev/null
fi
PORT_FP=$((20000 + RANDOM % 10000)); PORT_IP=$((PORT_FP + 1))
cleanup() { kill "${FP_PID:-}" "${IP_PID:-}" 2>/dev/null || true; }
trap cleanup EXIT
setsid "$FP" serve --listen 127.0.0.1:$PORT_FP >/dev/null 2>&1 & FP_PID=$!
iperf3 -s -p $PORT_IP >/dev/null 2>&1 & IP_PID=$!
sleep 1
fp=$("$FP" send 127.0.0.1:$PORT_FP --bytes "$BYTES" --json | python3 -c 'import json,sys; r=json.load(sys.stdin); e=r["end"]; print(e["sum_received"]["bits_per_second"], e["fencepost"]["hashes_match"])')
tcp=$(iperf3 -c 127.0.0.1 -p $PORT_IP -n "${BYTES%B}" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])')
# Plain UDP at an offered 20 Gbit/s: what the receiver gets is UDP's loopback ceiling.
udp=$(iperf3 -c 127.0.0.1 -p $PORT_IP -u -b 20G -l 1472 -t 3 -J | python3 -c 'import json,sys; e=json.load(sys.stdin)["end"]["sum"]; print(e["bits_per_second"] * (1 - e["lost_percent"] / 100))')
# shellcheck disable=SC2086 # $fp holds two fields: bit rate and hash verdict
python3 - $fp "$tcp" "$udp" <<'PY'
import sys
fp, ok = float(sys.argv[1]), sys.argv[2]
tcp, udp = float(sys.argv[3]), float(sys.argv[4])
print("loopback, one stream each, measured in the same run")
print(f"  fencepost (1 GB, SHA-256 checked: {ok}) {fp / 1e9:7.2f} Gbit/s")
print(f"  kernel TCP (iperf3)                     {tcp / 1e9:7.2f} Gbit/s")
print(f"  plain UDP (iperf3 -u, 1472 B, received) {udp / 1e9:7.2f} Gbit/s")
print(f"  fencepost / TCP = {fp / tcp:.2f}, fencepost / UDP = {fp / udp:.2f}; target >= 1 Gbit/s: {'met' if fp >= 1e9 else 'NOT met'}")
PY
