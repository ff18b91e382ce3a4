#!/usr/bin/env bash
# demo.sh up|down — the product tour: build enoki and the samples, start a local control plane,
# install the CRDs, run `enoki run` in the background, apply the sample compositions, wait until
# they are Ready and print what happened.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export TESTENV_DIR="${DEMO_DIR:-$ROOT/target/demo}"

stop_enoki() {
  for p in enoki registry; do
    if [ -f "$TESTENV_DIR/$p.pid" ]; then
      kill "$(cat "$TESTENV_DIR/$p.pid")" 2>/dev/null || true
      rm -f "$TESTENV_DIR/$p.pid"
    fi
  done
}
case "${1:-up}" in
  down) stop_enoki; hack/testenv.sh down; exit 0 ;;
  up) ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

step() { echo; echo "== $* =="; }
step "set-up (rust targets, Debian packages, control-plane binaries)"
hack/setup.sh
mkdir -p target
K8S_TESTBIN="$(hack/k8s-testbin.sh)"; export K8S_TESTBIN

step "building enoki and the sample synthesizers"
# The same build as `make test` (a `-p` build unifies features differently and recompiles).
# shellcheck source=hack/cargo-env.sh
. hack/cargo-env.sh
cargo build --locked -q --workspace --all-targets
hack/build-samples.sh 2>/dev/null
target/debug/enoki module preinit target/samples/helm-chart.reactor.wasm -o target/samples/helm-chart.wasm
target/debug/enoki crds > target/demo-crds.yaml

step "starting etcd + kube-apiserver + kube-controller-manager on 127.0.0.1"
stop_enoki
TESTENV_CRDS="$ROOT/target/demo-crds.yaml" hack/testenv.sh up
# shellcheck disable=SC1091
. "$TESTENV_DIR/env"

step "starting enoki run (log: $TESTENV_DIR/enoki.log)"
echo "demo: enoki runs as the local control plane's admin, single-tenant (no impersonation, every" >&2
echo "demo: Composition acts as the controller). The default install (deploy/base, the Helm chart)" >&2
echo "demo: is multi-tenant: each Composition acts as its namespace's enoki-composer account." >&2
target/debug/enoki run --lepton-persistent-volumes --module-cache-dir "$TESTENV_DIR/module-cache" \
  --helm-module target/samples/helm-chart.wasm >"$TESTENV_DIR/enoki.log" 2>&1 &
echo $! > "$TESTENV_DIR/enoki.pid"

step "applying the samples (each module stored in a ConfigMap in enoki-system)"
kubectl create namespace enoki-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create namespace demo --dry-run=client -o yaml | kubectl apply -f - >/dev/null
module_cm() {  # module_cm NAME FILE — gzip-compressed (ConfigMaps hold at most 1 MiB)
  gzip -9 -c "$2" > "$TESTENV_DIR/$1.wasm.gz"
  kubectl -n enoki-system create configmap "$1" --from-file=module.wasm="$TESTENV_DIR/$1.wasm.gz" \
    --dry-run=client -o yaml | kubectl apply --server-side -f - >/dev/null
}
module_cm hello-rust-module target/wasm32-wasip1/release/hello-rust.wasm
module_cm rust-component-module target/wasm32-wasip2/release/rust-component.wasm
module_cm go-module target/samples/go.wasm
module_cm c-module target/samples/c.wasm
module_cm assemblyscript-module target/samples/assemblyscript.wasm
for s in samples/0*/composition.yaml; do
  grep -q 'REGISTRY/' "$s" || kubectl apply -f "$s"
done

step "publishing the Python, TypeScript and Helm modules (14-41 MB) to a local OCI registry"
REGISTRY="$(hack/registry.sh "$TESTENV_DIR/registry" "${DEMO_REGISTRY_PORT:-5123}")"
cp "$TESTENV_DIR/registry/pid" "$TESTENV_DIR/registry.pid"
for lang in python typescript helm; do
  digest="$(target/debug/enoki module push "target/samples/$lang.wasm" "$REGISTRY/samples/$lang:0.1.0" | head -1)"
  echo "  $lang: $REGISTRY/samples/$lang:0.1.0@$digest"
  sample="$(ls -d samples/*-"$lang")"
  sed -e "s|REGISTRY/|$REGISTRY/|" -e "s|@DIGEST|@$digest|" "$sample/composition.yaml" | kubectl apply -f -
done

step "a chart through the built-in helm synthesizer: metrics-server pushed with helm push, pinned"
HELM="$(TOOLS=helm hack/tools.sh)/helm"
rm -rf "$TESTENV_DIR/charts"; mkdir -p "$TESTENV_DIR/charts"
"$HELM" package target/charts/metrics-server -d "$TESTENV_DIR/charts" >/dev/null
pushed="$("$HELM" push "$TESTENV_DIR"/charts/metrics-server-*.tgz "oci://$REGISTRY/charts" --plain-http 2>&1)"
chart="$(sed -n 's/^Pushed: //p' <<<"$pushed")@$(grep -o 'sha256:[0-9a-f]*' <<<"$pushed" | head -1)"
echo "  chart: $chart"
sed -e "s|CHART|$chart|" samples/12-helm/builtin.yaml | kubectl apply -f -

step "playing the parts of the operators the built-ins' outputs are for (no KBS operator, no kubelet here)"
for _ in $(seq 60); do kubectl -n demo get kbsconfig trustee-kbs-config >/dev/null 2>&1 && break; sleep 1; done
kubectl -n demo patch kbsconfig trustee-kbs-config --subresource=status --type=merge -p '{"status":{"isReady":true}}'
for _ in $(seq 60); do kubectl -n demo get deployment llama >/dev/null 2>&1 && break; sleep 1; done
kubectl -n demo patch deployment llama --subresource=status --type=merge -p '{"status":{"replicas":1,"readyReplicas":1}}'

step "waiting for every composition to be Ready"
if ! kubectl wait --for=condition=Ready composition --all -A --timeout=180s; then
  echo "compositions did not become Ready; enoki log:" >&2
  tail -n 40 "$TESTENV_DIR/enoki.log" >&2
  exit 1
fi

step "compositions"
kubectl get comp -A -o wide
step "synthesizers"
kubectl get synth
step "what the compositions produced in namespace demo (managed by enoki)"
kubectl get configmaps,serviceaccounts,services,secrets,roles,rolebindings,deployments,horizontalpodautoscalers -n demo -l enoki.dev/managed-by \
  -o custom-columns='KIND:.kind,NAME:.metadata.name,COMPOSITION-UID:.metadata.labels.enoki\.dev/managed-by'
step "built-ins: TrusteeConfig, ClusterResourceQuota and LeptonDeployment status (written back by enoki)"
kubectl -n demo get trusteeconfig trustee -o jsonpath='TrusteeConfig trustee: isReady={.status.isReady} ({.status.statusDescription}){"\n"}'
kubectl get clusterresourcequota team-demo -o jsonpath='ClusterResourceQuota team-demo used: {.status.total.used}{"\n"}'
kubectl -n demo get leptondeployment llama -o jsonpath='LeptonDeployment llama: state={.status.state} endpoint={.status.endpoint.external_endpoint}{"\n"}'
kubectl -n demo get kbsconfig,deployments,ingresses,pvc -o name
step "status of sample 01's current synthesis"
kubectl get comp hello -n demo -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}){"\n"}{end}'
kubectl get comp hello -n demo -o jsonpath='module {.status.currentSynthesis.moduleDigest}{"\n"}slices {.status.currentSynthesis.resourceSlices[*].name}{"\n"}'

cat <<MSG

enoki is running against a local control plane. Try:

  source $TESTENV_DIR/env                       # KUBECONFIG + kubectl on PATH
  kubectl get comp -A
  kubectl -n demo patch configmap hello-config --type merge -p '{"data":{"greeting":"hej"}}'
  kubectl -n demo get configmap hello-message -o jsonpath='{.data.message}'   # follows the input
  kubectl get resourceslices.enoki.dev -n demo
  tail -f $TESTENV_DIR/enoki.log

Stop everything with: make demo-down
MSG
