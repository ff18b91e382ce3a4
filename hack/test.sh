#!/usr/bin/env bash
# test.sh — everything `make test` does: set up, build the control plane (or reuse it), start
# it, check formatting and lints, run every test against it, and stop it even on failure.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export TESTENV_DIR="${TESTENV_DIR:-$ROOT/target/testenv}"

T_ALL=$(date +%s)
# A fresh clone (CI) builds once: incremental artifacts would only double target/'s size.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi
df -h "$ROOT" | tail -1 | awk '{print "test.sh: " $4 " free on " $6}' >&2
phase() {  # phase NAME CMD... — run and print how long it took
  local name="$1"; shift
  local t0; t0=$(date +%s)
  echo "==> $name" >&2
  "$@"
  echo "==> $name: $(( $(date +%s) - t0 ))s" >&2
}

phase "setup (rust targets, Debian packages)" hack/setup.sh
mkdir -p target
phase "control plane binaries (etcd, kube-apiserver, kube-controller-manager, kubectl)" \
  bash -c 'hack/k8s-testbin.sh > target/.k8s-testbin-dir'
K8S_TESTBIN="$(cat target/.k8s-testbin-dir)"; export K8S_TESTBIN

phase "tools (helm, built from the Go module proxy, cached per machine)" \
  bash -c 'TOOLS=helm hack/tools.sh > target/.tools-dir'
HELM="$(cat target/.tools-dir)/helm"; export HELM
phase "samples to wasm (Rust p1 + p2, Go, C, AssemblyScript, Python, TypeScript)" hack/build-samples.sh
phase "health checkers (kstatus: tests/health; Argo CD's Lua health: tests/health-argocd, Go 1.27)" \
  bash -c 'cd tests/health && go vet ./... && go build -o ../../target/health . &&
    cd ../health-argocd && GOTOOLCHAIN=go1.27.3 go build -o ../../target/health-argocd .'
# shellcheck source=hack/cargo-env.sh
. hack/cargo-env.sh
phase "cargo build + clippy -D warnings (workspace, all targets; clippy-driver as rustc wrapper)" \
  cargo build --workspace --all-targets --locked
phase "pre-initialize the Helm module (enoki module preinit)" target/debug/enoki module preinit \
  target/samples/helm-chart.reactor.wasm -o target/samples/helm-chart.wasm
phase "SDK packages (cargo publish --dry-run, Go module proxy dir, npm pack, wheel)" hack/sdk-packages.sh
phase "render CRDs" bash -c 'for f in crds/manifests/*.yaml crds/manifests/builtins/*.yaml; do echo ---; cat "$f"; done > target/crds.yaml'
export TESTENV_CRDS="$ROOT/target/crds.yaml"

REMOTE_DIR="$ROOT/target/testenv-remote"
trap 'hack/testenv.sh down; TESTENV_DIR="$REMOTE_DIR" hack/testenv.sh down' EXIT
phase "start control plane" hack/testenv.sh up
# A second API server (no kube-controller-manager, no CRDs): the target cluster of the
# --remote-kubeconfig e2e (tests/tests/remote.rs).
phase "start the remote control plane" \
  env TESTENV_DIR="$REMOTE_DIR" TESTENV_KCM=0 TESTENV_CRDS= hack/testenv.sh up
export TESTENV_REMOTE_KUBECONFIG="$REMOTE_DIR/kubeconfig"
# shellcheck disable=SC1091
. "$TESTENV_DIR/env"
echo "==> API server: $(kubectl version -o json | python3 -c 'import json,sys; v=json.load(sys.stdin)["serverVersion"]; print(v["gitVersion"], v["platform"])')" >&2

phase "cargo fmt --check" cargo fmt --all --check
phase "plan and core stay pure (no tokio/kube-client/hyper/wasmtime)" hack/check-plan-deps.sh
phase "decision modules stay pure (no client, Context or runtime)" hack/check-pure-modules.sh
phase "cargo test (unit, golden, e2e against the control plane)" cargo test --workspace --locked
phase "go test (sample 11: enoki's stdin as Eno's SDK reads it)" bash -c 'cd samples/11-eno-go && go test ./...'
phase "python SDK and sample 09 under CPython" python3 -m unittest discover -s synthesizer-sdk/python/tests
phase "Helm chart's static manifests match deploy/base" hack/helm-chart.sh --check
phase "docs/from-eno.md's inventory line matches its rows" python3 hack/eno-inventory.py --check
phase "synthesizer WIT matches the wasmtime-wasi in Cargo.lock" hack/sync-wit.sh --check
phase "cargo doc" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked -q
echo "==> all done in $(( $(date +%s) - T_ALL ))s" >&2
