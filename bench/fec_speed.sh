#!/usr/bin/env bash
# FEC encode/decode throughput (MB/s of source data) for the codes fencepost sends,
# on the default profile's payload size (crates/fencepost-proto/examples/fec_speed.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release --quiet -p fencepost-proto --example fec_speed
