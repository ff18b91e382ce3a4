#!/usr/bin/env bash
# soak.sh — what `make soak` does (not part of `make test`): a release build of enoki, a fresh
# local control plane, then tests/benches/soak.rs — 300 Compositions whose inputs change every
# 3 s for ENOKI_SOAK_MINUTES (default 30): RSS and watches at start and end, error conditions,
# every Composition converged at the end. Writes target/soak.md.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export TESTENV_DIR="${TESTENV_DIR:-$ROOT/target/soak-testenv}"
hack/setup.sh
mkdir -p target
K8S_TESTBIN="$(hack/k8s-testbin.sh)"; export K8S_TESTBIN
hack/build-samples.sh
cargo build --release --locked -p reconciler-controller --bin enoki
export ENOKI_BIN="$ROOT/target/release/enoki"
for f in crds/manifests/*.yaml crds/manifests/builtins/*.yaml; do echo ---; cat "$f"; done > target/crds.yaml
export TESTENV_CRDS="$ROOT/target/crds.yaml"
trap 'hack/testenv.sh down' EXIT
hack/testenv.sh up
# shellcheck disable=SC1091
. "$TESTENV_DIR/env"
cargo bench --locked -p enoki-tests --bench soak | tee target/soak.md
