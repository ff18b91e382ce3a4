#!/usr/bin/env bash
# testenv.sh up|down|status|stop-apiserver|start-apiserver|stop-etcd|start-etcd — run etcd + kube-apiserver +
# kube-controller-manager on 127.0.0.1
# (random free ports, TLS, token auth, RBAC) for tests and the demo.
#
#   K8S_TESTBIN     directory with etcd, kube-apiserver, kube-controller-manager (hack/k8s-testbin.sh)
#   TESTENV_DIR     state directory (default: <repo>/target/testenv); gets kubeconfig, env, logs
#   TESTENV_CRDS    optional YAML applied before kube-controller-manager starts (so its garbage
#                   collector discovers those kinds at once instead of after its 30 s resync)
#   TESTENV_ETCD_QUOTA  etcd's space quota in bytes (default: etcd's, 2 GiB)
#   TESTENV_PROFILING  1 serves kube-apiserver's /debug/pprof (profiles of the control plane)
#   TESTENV_KCM     1 (default) starts kube-controller-manager with the few controllers the
#                   tests need (see below)
#
# `down` stops exactly the processes `up` started (by their recorded PIDs), nothing else.
# `stop-apiserver` / `start-apiserver` stop and restart only the API server (same etcd data,
# same port): outage tests and benchmarks; `stop-etcd` / `start-etcd` the same for etcd.
set -euo pipefail

CMD="${1:-up}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TESTENV_DIR="${TESTENV_DIR:-$ROOT/target/testenv}"
BIN_DIR="${K8S_TESTBIN:-}"
WITH_KCM="${TESTENV_KCM:-1}"
START_TIMEOUT="${TESTENV_START_TIMEOUT:-180}"

log() { echo "testenv: $*" >&2; }

stop_one() {
  local f="$TESTENV_DIR/$1.pid" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}
down() { stop_one kcm; stop_one apiserver; stop_one etcd; }

case "$CMD" in
  down) down; log "stopped"; exit 0 ;;
  stop-apiserver) stop_one apiserver; log "kube-apiserver stopped"; exit 0 ;;
  start-apiserver)
    [ -f "$TESTENV_DIR/apiserver.cmd" ] || { log "no $TESTENV_DIR/apiserver.cmd: run up first"; exit 1; }
    bash -c "exec $(cat "$TESTENV_DIR/apiserver.cmd")" >>"$TESTENV_DIR/apiserver.log" 2>&1 &
    echo $! > "$TESTENV_DIR/apiserver.pid"
    # shellcheck disable=SC1091
    . "$TESTENV_DIR/env"
    for _ in $(seq 1 300); do kubectl get --raw /readyz >/dev/null 2>&1 && { log "kube-apiserver started again"; exit 0; }; sleep 0.2; done
    log "kube-apiserver did not become ready"; exit 1 ;;
  stop-etcd) stop_one etcd; log "etcd stopped"; exit 0 ;;
  start-etcd)
    [ -f "$TESTENV_DIR/etcd.cmd" ] || { log "no $TESTENV_DIR/etcd.cmd: run up first"; exit 1; }
    for v in $(compgen -e | grep "^ETCD_" || true); do unset "$v"; done
    bash -c "exec $(cat "$TESTENV_DIR/etcd.cmd")" >>"$TESTENV_DIR/etcd.log" 2>&1 &
    echo $! > "$TESTENV_DIR/etcd.pid"
    for _ in $(seq 1 300); do curl -fsS "$(cat "$TESTENV_DIR/etcd.url")/health" >/dev/null 2>&1 && { log "etcd started again"; exit 0; }; sleep 0.2; done
    log "etcd did not become healthy"; exit 1 ;;
  status)
    for p in etcd apiserver kcm; do
      if [ -f "$TESTENV_DIR/$p.pid" ] && kill -0 "$(cat "$TESTENV_DIR/$p.pid")" 2>/dev/null; then
        echo "$p: running (pid $(cat "$TESTENV_DIR/$p.pid"))"
      else
        echo "$p: stopped"
      fi
    done
    exit 0 ;;
  up) ;;
  *) echo "usage: $0 up|down|status|stop-apiserver|start-apiserver|stop-etcd|start-etcd" >&2; exit 2 ;;
esac

[ -n "$BIN_DIR" ] || { log "K8S_TESTBIN is not set (run: K8S_TESTBIN=\$(hack/k8s-testbin.sh) $0 up)"; exit 1; }
for b in etcd kube-apiserver kube-controller-manager; do
  [ -x "$BIN_DIR/$b" ] || { log "missing $BIN_DIR/$b (run hack/k8s-testbin.sh)"; exit 1; }
done
command -v openssl >/dev/null || { log "openssl is required"; exit 1; }

down
rm -rf "$TESTENV_DIR"
mkdir -p "$TESTENV_DIR/pki" "$TESTENV_DIR/etcd-data" "$TESTENV_DIR/kcm-certs"
PKI="$TESTENV_DIR/pki"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() {  # wait_for NAME CMD...
  local name="$1"; shift
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$TESTENV_DIR/$name.pid")" 2>/dev/null; then
      log "$name exited; last log lines:"; tail -n 40 "$TESTENV_DIR/$name.log" >&2 || true; return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "$name not ready after ${START_TIMEOUT}s; last log lines:"; tail -n 40 "$TESTENV_DIR/$name.log" >&2 || true; return 1
    fi
    sleep 0.5
  done
}
trap 'rc=$?; if [ $rc -ne 0 ]; then down; fi' EXIT
T0=$(date +%s)

# ---- PKI: one CA; serving cert for 127.0.0.1/localhost; admin client cert; SA key pair ----
(
  cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 -keyout ca.key -out ca.crt \
    -subj "/CN=enoki-testenv-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1" > serving.ext
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
    -extfile serving.ext -out apiserver.crt 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth" > client.ext
  openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=testenv-admin" 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
    -extfile client.ext -out admin.crt 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  rm -f ./*.csr ./*.ext ca.srl
)
TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
echo "$TOKEN,testenv-admin,testenv-admin,system:masters" > "$PKI/tokens.csv"
# Two tenant users with no rights of their own (the tenancy e2e grants them namespace `edit`).
TENANT_A_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
TENANT_B_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
echo "$TENANT_A_TOKEN,tenant-a,tenant-a" >> "$PKI/tokens.csv"
echo "$TENANT_B_TOKEN,tenant-b,tenant-b" >> "$PKI/tokens.csv"
chmod 600 "$PKI"/*.key "$PKI/tokens.csv"

ETCD_PORT="$(free_port)"; PEER_PORT="$(free_port)"; API_PORT="$(free_port)"; KCM_PORT="$(free_port)"

# ---- etcd (ETCD_* environment variables act as flags: drop inherited ones) ----
for v in $(compgen -e | grep "^ETCD_" || true); do unset "$v"; done
ETCD_EXTRA=()
"$BIN_DIR/etcd" --help 2>&1 | grep -q -- '--unsafe-no-fsync' && ETCD_EXTRA+=(--unsafe-no-fsync=true)
# TESTENV_ETCD_QUOTA: etcd's space quota in bytes (its default is 2 GiB; `make bench` raises it).
[ -n "${TESTENV_ETCD_QUOTA:-}" ] && ETCD_EXTRA+=(--quota-backend-bytes="$TESTENV_ETCD_QUOTA")
ETCD_CMD=("$BIN_DIR/etcd" --name=testenv --data-dir="$TESTENV_DIR/etcd-data"
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT"
  --listen-peer-urls="http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$PEER_PORT"
  --initial-cluster="testenv=http://127.0.0.1:$PEER_PORT" --listen-metrics-urls=""
  "${ETCD_EXTRA[@]}")
# Kept so `testenv.sh start-etcd` can bring the same etcd back (outage tests).
{ printf '%q ' "${ETCD_CMD[@]}"; echo; } > "$TESTENV_DIR/etcd.cmd"
echo "http://127.0.0.1:$ETCD_PORT" > "$TESTENV_DIR/etcd.url"
"${ETCD_CMD[@]}" >"$TESTENV_DIR/etcd.log" 2>&1 &
echo $! > "$TESTENV_DIR/etcd.pid"
wait_for etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
log "etcd ready on 127.0.0.1:$ETCD_PORT ($(( $(date +%s) - T0 ))s)"

# ---- kube-apiserver ----
API_EXTRA=()
if ! ip route show default 2>/dev/null | grep -q .; then
  API_EXTRA+=(--advertise-address=127.0.0.1)   # no default route: avoid the host-interface lookup
fi
# Audit log (metadata level): lets tests count the requests enoki makes.
printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: ["RequestReceived"]' 'rules:' '- level: Metadata' \
  > "$TESTENV_DIR/audit-policy.yaml"
API_CMD=("$BIN_DIR/kube-apiserver"
  --audit-policy-file="$TESTENV_DIR/audit-policy.yaml" --audit-log-path="$TESTENV_DIR/audit.log"
  --audit-log-maxsize=500 --audit-log-mode=blocking
  --etcd-servers="http://127.0.0.1:$ETCD_PORT"
  --bind-address=127.0.0.1 --secure-port="$API_PORT" --cert-dir="$TESTENV_DIR/pki"
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key"
  --client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv"
  --authorization-mode=RBAC
  --service-account-issuer=https://kubernetes.default.svc.cluster.local
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key"
  --service-cluster-ip-range=10.0.0.0/24
  --disable-admission-plugins=ServiceAccount
  --endpoint-reconciler-type=none
  --allow-privileged=true --profiling="$([ "${TESTENV_PROFILING:-0}" = 1 ] && echo true || echo false)" --v=1
  "${API_EXTRA[@]}")
# Kept so `testenv.sh start-apiserver` can bring the same server back (outage benchmarks).
{ printf '%q ' "${API_CMD[@]}"; echo; } > "$TESTENV_DIR/apiserver.cmd"
"${API_CMD[@]}" >"$TESTENV_DIR/apiserver.log" 2>&1 &
echo $! > "$TESTENV_DIR/apiserver.pid"
api_ok() { [ "$(curl -sS --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz")" = ok ] &&
           curl -fsS -o /dev/null --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/api/v1/namespaces/default"; }
wait_for apiserver api_ok
log "kube-apiserver ready on https://127.0.0.1:$API_PORT ($(( $(date +%s) - T0 ))s)"

# ---- kubeconfig (token user; a client-certificate user is included too) ----
b64() { base64 -w0 < "$1"; }
umask 077
cat > "$TESTENV_DIR/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: enoki-testenv
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: testenv-admin
  user:
    token: $TOKEN
- name: testenv-admin-cert
  user:
    client-certificate-data: $(b64 "$PKI/admin.crt")
    client-key-data: $(b64 "$PKI/admin.key")
- name: tenant-a
  user:
    token: $TENANT_A_TOKEN
- name: tenant-b
  user:
    token: $TENANT_B_TOKEN
contexts:
- name: enoki-testenv
  context:
    cluster: enoki-testenv
    user: testenv-admin
    namespace: default
- name: tenant-a
  context:
    cluster: enoki-testenv
    user: tenant-a
- name: tenant-b
  context:
    cluster: enoki-testenv
    user: tenant-b
current-context: enoki-testenv
KC
umask 022

# ---- CRDs before the garbage collector starts (its discovery resyncs only every 30 s) ----
if [ -n "${TESTENV_CRDS:-}" ]; then
  "$BIN_DIR/kubectl" --kubeconfig="$TESTENV_DIR/kubeconfig" apply --server-side \
    --field-manager=enoki-testenv -f "$TESTENV_CRDS" >&2
  "$BIN_DIR/kubectl" --kubeconfig="$TESTENV_DIR/kubeconfig" wait --for=condition=Established \
    --timeout=60s crd --all >&2
fi

# ---- kube-controller-manager: garbage collector, namespaces, RBAC aggregation, default
# ServiceAccounts and the PV/PVC protection finalizers (no scheduler, no kubelet) ----
if [ "$WITH_KCM" = 1 ]; then
  "$BIN_DIR/kube-controller-manager" \
    --kubeconfig="$TESTENV_DIR/kubeconfig" \
    --authentication-kubeconfig="$TESTENV_DIR/kubeconfig" \
    --authorization-kubeconfig="$TESTENV_DIR/kubeconfig" \
    --controllers=garbage-collector-controller,namespace-controller,clusterrole-aggregation-controller,serviceaccount-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller,resourcequota-controller \
    --leader-elect=false --use-service-account-credentials=false \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$TESTENV_DIR/kcm-certs" \
    --v=1 >"$TESTENV_DIR/kcm.log" 2>&1 &
  echo $! > "$TESTENV_DIR/kcm.pid"
  wait_for kcm curl -fsSk "https://127.0.0.1:$KCM_PORT/healthz"
  log "kube-controller-manager ready: garbage-collector, namespace, clusterrole-aggregation, serviceaccount, pv/pvc-protection, resourcequota controllers ($(( $(date +%s) - T0 ))s)"
fi

cat > "$TESTENV_DIR/env" <<ENV
export KUBECONFIG=$TESTENV_DIR/kubeconfig
export TESTENV_API_URL=https://127.0.0.1:$API_PORT
export TESTENV_ETCD_URL=http://127.0.0.1:$ETCD_PORT
export TESTENV_AUDIT_LOG=$TESTENV_DIR/audit.log
export PATH=$BIN_DIR:\$PATH
ENV
trap - EXIT
log "up in $(( $(date +%s) - T0 ))s; run: source $TESTENV_DIR/env"
