#!/usr/bin/env bash
# helm-module.sh OUT ENOKI — build the module of the built-in `helm` synthesizer
# (synthesizer-sdk/go/helm/cmd/helm-chart: Helm's engine, GOOS=wasip1, a WASI reactor) to OUT,
# reproducibly (-trimpath, no VCS stamp), without the Kubernetes API types (cmd/lean writes
# target/helm-lean/go.mod: half the code, the same renders), pre-initialized by the enoki binary ENOKI (`enoki
# module preinit`: Go's runtime and package inits run once here, not in every render). The
# image ships it at /usr/lib/enoki/helm.wasm, the default of `enoki run --helm-module`.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mkdir -p "$(dirname "$1")" && cd "$(dirname "$1")" && pwd)/$(basename "$1")"
enoki="${2:?usage: helm-module.sh OUT ENOKI (an enoki binary that runs here)}"
t=$(date +%s)
(cd synthesizer-sdk/go/helm && go run ./cmd/lean ../../../target/helm-lean &&
  GOOS=wasip1 GOARCH=wasm GOFLAGS=-buildvcs=false go build -modfile=../../../target/helm-lean/go.mod \
    -trimpath -buildmode=c-shared -ldflags="-s -w" -o "$out.reactor" ./cmd/helm-chart)
"$enoki" module preinit "$out.reactor" -o "$out" >&2
rm -f "$out.reactor"
echo "helm-module: $out ($(du -h "$out" | cut -f1)) in $(( $(date +%s) - t ))s" >&2
