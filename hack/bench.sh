#!/usr/bin/env bash
# bench.sh — what `make bench` does: set up, build enoki in release mode, start the local
# control plane, run the controller benchmarks (tests/benches/controller.rs) and the large-module
# benchmark, print the tables and keep them in target/bench-*.md. Not part of `make test`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export TESTENV_DIR="${TESTENV_DIR:-$ROOT/target/bench-testenv}"
hack/setup.sh
mkdir -p target
K8S_TESTBIN="$(hack/k8s-testbin.sh)"; export K8S_TESTBIN
hack/build-samples.sh
hack/build-go-k8s.sh
HELM="$(TOOLS=helm hack/tools.sh)/helm"; export HELM
cargo build --release --locked -p reconciler-controller --bin enoki
target/release/enoki module preinit target/samples/helm-chart.reactor.wasm -o target/samples/helm-chart.wasm
export ENOKI_BIN="$ROOT/target/release/enoki"
for f in crds/manifests/*.yaml crds/manifests/builtins/*.yaml; do echo ---; cat "$f"; done > target/crds.yaml
export TESTENV_CRDS="$ROOT/target/crds.yaml"
trap 'hack/testenv.sh down' EXIT
# The volume bench stores 2 × 1.6 GiB of ResourceSlices (and etcd's history of their status writes).
TESTENV_ETCD_QUOTA="${TESTENV_ETCD_QUOTA:-17179869184}" hack/testenv.sh up
# shellcheck disable=SC1091
. "$TESTENV_DIR/env"
cargo bench --locked -p enoki-tests --bench controller | tee target/bench-controller.md
cargo bench --locked -p enoki-tests --bench volume | tee target/bench-volume.md
# The same with the outputs applied, at the scale the local API server holds.
BENCH_VOLUME_APPLY=1 BENCH_VOLUME_COMPS=50 BENCH_VOLUME_WHOLE=0 \
  cargo bench --locked -p enoki-tests --bench volume | tee -a target/bench-volume.md
# The large Go module and the Helm module through the wasm host (no cluster needed).
cargo bench --locked -p enoki-tests --bench large_module | tee target/bench-large-module.md
