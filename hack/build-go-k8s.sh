#!/usr/bin/env bash
# build-go-k8s.sh — build tests/guests/go-k8s (a Go synthesizer importing k8s.io/api,
# apimachinery and client-go, about 90 MB of wasm) to target/samples/go-k8s.wasm for the
# large-module benchmark. Not part of `make test` (the Go build takes about half a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/samples
(cd tests/guests/go-k8s && GOOS=wasip1 GOARCH=wasm go build -ldflags="-s -w" -o ../../../target/samples/go-k8s.wasm .)
ls -l target/samples/go-k8s.wasm >&2
