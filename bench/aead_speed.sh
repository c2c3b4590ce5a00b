#!/usr/bin/env bash
# The packet cipher's cost: AES-256-GCM seals and opens of a 1,400-byte body with ring's
# and with AWS-LC's implementation, interleaved (docs/speed.md, "The packet cipher").
# 2026-12-02: AWS-LC 10-20 % less per packet here (its AVX-512 code on a CPU with VAES).
# Usage: bash bench/aead_speed.sh [BODY_BYTES] [PACKETS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p fencepost-proto --example aead_speed
exec ./target/release/examples/aead_speed "$@"
