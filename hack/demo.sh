#!/usr/bin/env bash
# demo.sh up|down — start a local control plane, install enoki's CRDs, and show how to reach it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export TESTENV_DIR="${DEMO_DIR:-$ROOT/target/demo}"
case "${1:-up}" in
  down) hack/testenv.sh down; exit 0 ;;
  up) ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

hack/setup.sh
mkdir -p target
K8S_TESTBIN="$(hack/k8s-testbin.sh)"; export K8S_TESTBIN
cargo build --locked -q -p reconciler-controller --bin enoki
target/debug/enoki crds > target/demo-crds.yaml
TESTENV_CRDS="$ROOT/target/demo-crds.yaml" hack/testenv.sh up
# shellcheck disable=SC1091
. "$TESTENV_DIR/env"

echo
echo "== enoki CRDs on the local control plane =="
kubectl get crds -l '!nothing' -o custom-columns=NAME:.metadata.name,ESTABLISHED:.status.conditions[?\(@.type==\"Established\"\)].status
echo
kubectl api-resources --api-group=enoki.dev
cat <<MSG

The control plane is running (etcd, kube-apiserver, kube-controller-manager on 127.0.0.1).
Reach it with:

  source $TESTENV_DIR/env          # sets KUBECONFIG and puts kubectl $(kubectl version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') on PATH
  kubectl get crds
  kubectl get comp -A

Stop it with: make demo-down
MSG
