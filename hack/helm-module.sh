#!/usr/bin/env bash
# helm-module.sh OUT — build the module of the built-in `helm` synthesizer
# (synthesizer-sdk/go/helm/cmd/helm-chart: Helm's engine, GOOS=wasip1) to OUT, reproducibly
# (-trimpath, no VCS stamp). The image ships it at /usr/lib/enoki/helm.wasm, the default of
# `enoki run --helm-module`.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mkdir -p "$(dirname "$1")" && cd "$(dirname "$1")" && pwd)/$(basename "$1")"
t=$(date +%s)
(cd synthesizer-sdk/go/helm && GOOS=wasip1 GOARCH=wasm GOFLAGS=-buildvcs=false \
  go build -trimpath -ldflags="-s -w" -o "$out" ./cmd/helm-chart)
echo "helm-module: $out ($(du -h "$out" | cut -f1)) in $(( $(date +%s) - t ))s" >&2
