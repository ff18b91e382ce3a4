#!/usr/bin/env bash
# heap-profile.sh — what `make heap-profile` does: a heaptrack profile of enoki reconciling a
# fleet of echo Compositions (N × 10 ConfigMaps) on a local control plane, unsharded (one
# replica) and with `--shards 4` over two replicas (the first one profiled), and the peak heap
# of each by the enoki source file and function that allocated it
# (target/heap-profile.md). Not part of `make test`. HEAP_N sets N (2000).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${HEAP_N:-2000}"
# HEAP_MODES=sharded profiles one setup again (the other's target/heap-profile/*.md is kept).
MODES="${HEAP_MODES:-unsharded sharded}"
for mode in $MODES; do
  case "$mode" in unsharded | sharded) ;; *) echo "HEAP_MODES: unsharded and/or sharded, not '$mode'" >&2; exit 2 ;; esac
done
export TESTENV_DIR="${TESTENV_DIR:-$ROOT/target/heap-testenv}"
hack/setup.sh
command -v heaptrack >/dev/null || { apt-get update -qq && apt-get install -y -qq heaptrack; }
K8S_TESTBIN="$(hack/k8s-testbin.sh)"; export K8S_TESTBIN
hack/build-samples.sh
# The release build with line tables (Cargo.toml's `profiling` profile).
cargo build --profile profiling --locked -p reconciler-controller --bin enoki
BIN="$ROOT/target/profiling/enoki"
for f in crds/manifests/*.yaml crds/manifests/builtins/*.yaml; do echo ---; cat "$f"; done > target/crds.yaml
export TESTENV_CRDS="$ROOT/target/crds.yaml"
trap 'pkill -TERM -f "^$BIN run" || true; hack/testenv.sh down' EXIT
hack/testenv.sh up
# shellcheck disable=SC1091
. "$TESTENV_DIR/env"
OUT="$ROOT/target/heap-profile"
mkdir -p "$OUT"

metric_sum() { # port, metric name prefix
  curl -s "127.0.0.1:$1/metrics" | awk -v m="$2" 'index($1, m) == 1 {s += $2} END {print s + 0}'
}

profile() { # mode: unsharded | sharded
  local mode=$1 ns="heap-$1" ports want
  kubectl create ns "$ns" >/dev/null
  kubectl -n "$ns" create configmap module-echo \
    --from-file=module.wasm=target/wasm32-wasip1/release/echo.wasm >/dev/null
  kubectl apply --server-side -f - >/dev/null <<Y
apiVersion: enoki.dev/v1alpha1
kind: Synthesizer
metadata: {name: $ns-echo}
spec:
  module: {configMap: {namespace: $ns, name: module-echo, key: module.wasm}}
  refs: [{key: config, resource: {group: "", version: v1, kind: ConfigMap}}]
Y
  # Unthrottled, as the benchmarks (the per-namespace rates would pace the fleet at about one
  # synthesis a second).
  local common=(run --namespace "$ns" --concurrency 8 --readiness-poll 1s
    --namespace-synthesis-rate 0 --namespace-slice-write-rate 0)
  if [ "$mode" = sharded ]; then
    local sh=(--shards 4 --leader-election-namespace "$ns" --lease-duration-secs 5)
    HOSTNAME=heap-0 heaptrack -o "$OUT/$mode" "$BIN" "${common[@]}" "${sh[@]}" \
      --metrics-addr 127.0.0.1:19100 >"$OUT/$mode-0.log" 2>&1 &
    HOSTNAME=heap-1 "$BIN" "${common[@]}" "${sh[@]}" --metrics-addr 127.0.0.1:19101 \
      >"$OUT/$mode-1.log" 2>&1 &
    ports="19100 19101"; want=4
  else
    heaptrack -o "$OUT/$mode" "$BIN" "${common[@]}" --metrics-addr 127.0.0.1:19100 \
      >"$OUT/$mode-0.log" 2>&1 &
    ports="19100"; want=1
  fi
  held() { local s=0 p; for p in $ports; do s=$((s + $(metric_sum "$p" enoki_shard_held))); done; echo "$s"; }
  until [ "$(held)" -ge "$want" ]; do sleep 1; done
  python3 - "$N" "$ns" >"$OUT/fleet.json" <<'PY'
import json, sys
n, ns = int(sys.argv[1]), sys.argv[2]
docs = []
for i in range(n):
    items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}-{j}"},
              "data": {"index": str(j), "payload": "x" * 64}} for j in range(10)]
    docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"items-{i}", "namespace": ns},
                 "data": {"items": json.dumps(items)}})
    docs.append({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
                 "metadata": {"name": f"comp-{i}", "namespace": ns},
                 "spec": {"synthesizer": {"name": f"{ns}-echo"},
                          "bindings": [{"key": "config", "resource": {"name": f"items-{i}"}}]}})
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
PY
  kubectl apply --server-side -f "$OUT/fleet.json" >/dev/null
  until [ "$(kubectl -n "$ns" get comp -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)" -ge "$N" ]; do
    sleep 10
  done
  sleep 20 # the sweep publishes its gauges every 15 s
  {
    echo "## $mode: $N Compositions × 10 ConfigMaps"
    echo
    for p in $ports; do
      echo "- replica on :$p: $(metric_sum "$p" enoki_shard_compositions) Compositions, $(metric_sum "$p" enoki_shard_managed_objects) managed objects cached; input cache $(metric_sum "$p" 'enoki_input_cache_objects{kept="whole"}') whole, $(metric_sum "$p" 'enoki_input_cache_objects{kept="metadata"}') metadata only"
    done
  } >"$OUT/$mode.md"
  pkill -TERM -f "^$BIN run" || true
  while pgrep -f "^$BIN run" >/dev/null || pgrep -f heaptrack_interpret >/dev/null; do sleep 1; done
  heaptrack_print -f "$OUT/$mode.zst" --print-peaks 0 --print-allocators 0 --print-temporary 0 \
    --print-leaks 0 --flamegraph-cost-type peak -F "$OUT/$mode.stacks" >/dev/null
  echo >>"$OUT/$mode.md"
  python3 hack/heap-breakdown.py "$OUT/$mode.stacks" >>"$OUT/$mode.md"
  # Nothing managed left for the next fleet's cluster-wide metadata watch: deletecollection
  # requests (`kubectl delete -l` deletes and waits object by object), again until none is
  # left (a request may end at the server's timeout before all are gone).
  until [ -z "$(kubectl -n "$ns" get cm -l enoki.dev/managed-by -o name --chunk-size=500 | head -1)" ]; do
    kubectl delete --raw "/api/v1/namespaces/$ns/configmaps?labelSelector=enoki.dev%2Fmanaged-by" \
      >/dev/null || sleep 5
  done
}

for mode in $MODES; do profile "$mode"; done
for mode in unsharded sharded; do
  if [ -f "$OUT/$mode.md" ]; then cat "$OUT/$mode.md"; fi
done | tee target/heap-profile.md
