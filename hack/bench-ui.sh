#!/usr/bin/env bash
# bench-ui.sh — what `make bench-ui` does: set up (chromium, chromedriver), build enoki in
# release mode, start a local control plane, and measure `enoki ui` on a fleet of 500
# Compositions (tests/benches/ui.rs); the table is kept in target/bench-ui.md.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export TESTENV_DIR="${TESTENV_DIR:-$ROOT/target/bench-testenv}"
hack/setup.sh
mkdir -p target
K8S_TESTBIN="$(hack/k8s-testbin.sh)"; export K8S_TESTBIN
cargo build --release --locked -p reconciler-controller --bin enoki
export ENOKI_BIN="$ROOT/target/release/enoki"
for f in crds/manifests/*.yaml crds/manifests/builtins/*.yaml; do echo ---; cat "$f"; done > target/crds.yaml
export TESTENV_CRDS="$ROOT/target/crds.yaml"
trap 'hack/testenv.sh down' EXIT
hack/testenv.sh up
# shellcheck disable=SC1091
. "$TESTENV_DIR/env"
cargo bench --locked -p enoki-tests --bench ui | tee target/bench-ui.md
