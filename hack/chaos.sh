#!/usr/bin/env bash
# chaos.sh — what `make chaos` does (not part of `make test`): set up, build, start the local
# control plane and run the long forms of the fault tests — crash-anywhere with 1,000 objects
# and 20 SIGKILLs per run for ENOKI_CHAOS_RUNS seeds (default 5), and the control-plane
# outages — printing their figures into target/chaos.md. ENOKI_CHAOS_SEED=<n> replays one seed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export TESTENV_DIR="${TESTENV_DIR:-$ROOT/target/chaos-testenv}"
hack/setup.sh
mkdir -p target
K8S_TESTBIN="$(hack/k8s-testbin.sh)"; export K8S_TESTBIN
hack/build-samples.sh
# shellcheck source=hack/cargo-env.sh
. hack/cargo-env.sh
cargo build --workspace --all-targets --locked
for f in crds/manifests/*.yaml crds/manifests/builtins/*.yaml; do echo ---; cat "$f"; done > target/crds.yaml
export TESTENV_CRDS="$ROOT/target/crds.yaml"
trap 'hack/testenv.sh down' EXIT
hack/testenv.sh up
# shellcheck disable=SC1091
. "$TESTENV_DIR/env"
export ENOKI_CHAOS=long
T0=$(date +%s)
cargo test --locked -p enoki-tests --test chaos --test outages -- --nocapture --test-threads 1 2>&1 \
  | tee target/chaos.log
grep -E '^chaos:' target/chaos.log > target/chaos.md || true
echo "chaos: done in $(( $(date +%s) - T0 ))s" | tee -a target/chaos.md
