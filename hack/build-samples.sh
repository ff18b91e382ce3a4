#!/usr/bin/env bash
# build-samples.sh — build every sample synthesizer to WebAssembly from source.
# Outputs land in target/wasm32-wasip1/release/*.wasm.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release --target wasm32-wasip1 -p sample-01-hello-rust
ls -l target/wasm32-wasip1/release/*.wasm >&2
