#!/usr/bin/env bash
# build-samples.sh — build every sample synthesizer to WebAssembly from source.
# Outputs: target/wasm32-wasip{1,2}/release/*.wasm (Rust samples, the echo test guest and the
# built-ins trustee/quota/lepton), target/samples/{go,eno-go,helm,helm-chart,c,assemblyscript,python,typescript}.wasm,
# target/charts/ (real-world Helm charts).
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
# Helm's engine in the sandbox: sample 12 (an embedded chart) and a synthesizer that renders
# any packaged chart bound as an input; real-world charts from the Go module proxy for the
# goldens against `helm template` (reconciler/controller/tests/helm.rs).
(cd samples/12-helm && go run github.com/enoki-dev/enoki/synthesizer-sdk/go/helm/cmd/lean ../../target/helm-lean-sample &&
  GOOS=wasip1 GOARCH=wasm go build -modfile=../../target/helm-lean-sample/go.mod -ldflags="-s -w" \
    -o ../../target/samples/helm.wasm .)
# The built-in's module is a WASI reactor: runnable as built (enoki calls _initialize, then
# _start); `make test`, `make demo` and `make bench` pre-initialize it once enoki is built
# (`enoki module preinit target/samples/helm-chart.reactor.wasm -o target/samples/helm-chart.wasm`).
# Without the Kubernetes API types (cmd/lean writes target/helm-lean/go.mod): half the code.
(cd synthesizer-sdk/go/helm && go run ./cmd/lean ../../../target/helm-lean &&
  GOOS=wasip1 GOARCH=wasm go build -modfile=../../../target/helm-lean/go.mod -buildmode=c-shared \
    -ldflags="-s -w" -o ../../../target/samples/helm-chart.reactor.wasm ./cmd/helm-chart)
cp target/samples/helm-chart.reactor.wasm target/samples/helm-chart.wasm
mkdir -p target/charts
for pinned in k8s.io/ingress-nginx@v0.0.0-20240708192948-52c50467d67d:charts/ingress-nginx \
  sigs.k8s.io/metrics-server@v0.9.0:charts/metrics-server \
  sigs.k8s.io/descheduler@v0.36.0:charts/descheduler; do
  module="${pinned%%:*}" dir="${pinned#*:}"
  src="$(cd synthesizer-sdk/go/helm && go mod download -json "$module" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  rm -rf "target/charts/$(basename "$dir")"
  cp -r "$src/$dir" "target/charts/$(basename "$dir")"
  chmod -R u+w "target/charts/$(basename "$dir")"
done
clang --target=wasm32-wasi -O2 -o target/samples/c.wasm samples/04-c/hello.c
hack/setup-langs.sh
(cd samples/08-assemblyscript && npm run -s build) && cp samples/08-assemblyscript/build/assemblyscript.wasm target/samples/
target/toolchains/python/bin/componentize-py -q -d synthesizer-sdk/wit -w synthesizer componentize app \
  -p samples/09-python -p synthesizer-sdk/python -o target/samples/python.wasm
(cd samples/10-typescript && npm run -s build) && cp samples/10-typescript/build/typescript.wasm target/samples/
ls -l target/samples/*.wasm target/wasm32-wasip1/release/*.wasm target/wasm32-wasip2/release/*.wasm >&2
