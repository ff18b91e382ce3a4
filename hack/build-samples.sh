#!/usr/bin/env bash
# build-samples.sh — build every sample synthesizer to WebAssembly from source.
# Outputs: target/wasm32-wasip{1,2}/release/*.wasm (Rust samples, the echo test guest and the
# built-ins trustee/quota/lepton), target/samples/{go,c,assemblyscript,python,typescript}.wasm.
# The AssemblyScript, Python and TypeScript toolchains come from hack/setup-langs.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release --target wasm32-wasip1 -p sample-01-hello-rust
cargo build --locked --release --target wasm32-wasip2 -p sample-02-rust-component
cargo build --locked --release --target wasm32-wasip1 -p guest-echo   # e2e test synthesizer
# Hostile guest that blocks in a WASI sleep, as a preview1 module and a preview2 component.
cargo build --locked --release --target wasm32-wasip1 -p guest-sleep
cargo build --locked --release --target wasm32-wasip2 -p guest-sleep
# The built-ins as standalone wasm synthesizers (their parity with the native ones is a test).
cargo build --locked --release --target wasm32-wasip1 -p reconciler-builtins --bins

mkdir -p target/samples
(cd samples/03-go && GOOS=wasip1 GOARCH=wasm go build -ldflags="-s -w" -o ../../target/samples/go.wasm .)
(cd samples/11-eno-go && GOOS=wasip1 GOARCH=wasm go build -ldflags="-s -w" -o ../../target/samples/eno-go.wasm .)
clang --target=wasm32-wasi -O2 -o target/samples/c.wasm samples/04-c/hello.c
hack/setup-langs.sh
(cd samples/08-assemblyscript && npm run -s build) && cp samples/08-assemblyscript/build/assemblyscript.wasm target/samples/
target/toolchains/python/bin/componentize-py -q -d synthesizer-sdk/wit -w synthesizer componentize app \
  -p samples/09-python -p synthesizer-sdk/python -o target/samples/python.wasm
(cd samples/10-typescript && npm run -s build) && cp samples/10-typescript/build/typescript.wasm target/samples/
ls -l target/samples/*.wasm target/wasm32-wasip1/release/*.wasm target/wasm32-wasip2/release/*.wasm >&2
