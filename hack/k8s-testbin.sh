#!/usr/bin/env bash
# k8s-testbin.sh — build etcd, kube-apiserver, kube-controller-manager and kubectl from Go
# modules into a per-machine cache outside the repository.
#
# Prints the directory holding the binaries on stdout (logs go to stderr). Idempotent: a
# finished build (marked by .complete) is reused; delete the directory to force a rebuild.
#
#   K8S_VERSION        tag of k8s.io/kubernetes without the v   (default 1.35.4)
#   ETCD_VERSION       tag of go.etcd.io/etcd/server/v3         (default 3.6.16)
#   K8S_TESTBIN_CACHE  cache root (default ${XDG_CACHE_HOME:-~/.cache}/enoki-testbin)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
CACHE="${K8S_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enoki-testbin}"
OUT="$CACHE/k8s-v$K8S_VERSION-etcd-v$ETCD_VERSION"
log() { echo "k8s-testbin: $*" >&2; }

if [ -f "$OUT/.complete" ]; then
  for b in etcd kube-apiserver kube-controller-manager kubectl; do
    [ -x "$OUT/$b" ] || { log "$OUT/$b missing; rebuilding"; rm -f "$OUT/.complete"; }
  done
  if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi
fi
command -v go >/dev/null || { log "no go toolchain on this machine (need Go >= 1.24)"; exit 1; }
mkdir -p "$OUT"
export CGO_ENABLED=0
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
START=$(date +%s)

# ---- etcd: a plain wrapper module (etcd's own replace directives only apply in its repo) ----
if [ ! -x "$OUT/etcd" ]; then
  mkdir "$W/etcd"
  (
    cd "$W/etcd"
    go mod init local.test/etcd-build >/dev/null 2>&1
    go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2
    log "building etcd v$ETCD_VERSION"
    go build -mod=mod -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$OUT/etcd.tmp" "$OUT/etcd"
  )
  log "etcd built after $(( $(date +%s) - START ))s"
fi

# ---- kubernetes: wrapper module mapping every staging module to its published v0.Y.Z tag ----
mkdir -p "$W/k8s"
(
  cd "$W/k8s"
  go mod init local.test/k8s-build >/dev/null 2>&1
  GOMOD_FILE="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [ -s "$GOMOD_FILE" ] || { log "could not download k8s.io/kubernetes@v$K8S_VERSION"; exit 1; }
  STAGING_VERSION="v0.${K8S_VERSION#1.}"          # 1.35.4 -> v0.35.4
  {
    echo "module local.test/k8s-build"
    echo
    grep -E '^(go|godebug) ' "$GOMOD_FILE"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    sed -n "s#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/k8s\.io/.*#	\1 => \1 $STAGING_VERSION#p" "$GOMOD_FILE"
    grep -E '=>' "$GOMOD_FILE" | grep -v '=> \./staging/src/k8s\.io/' \
      | sed -E 's/^[[:space:]]*(replace[[:space:]]+)?/	/' || true
    echo ")"
  } > go.mod
  log "wrapper go.mod has $(grep -c ' => ' go.mod) replacements"
  go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION" \
               "k8s.io/kubernetes/cmd/kube-controller-manager@v$K8S_VERSION" \
               "k8s.io/kubernetes/cmd/kubectl@v$K8S_VERSION" >&2
  MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
  LDFLAGS="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS="$LDFLAGS -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
    LDFLAGS="$LDFLAGS -X $pkg.gitTreeState=clean -X $pkg.gitCommit=v$K8S_VERSION -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  for cmd in kube-apiserver kube-controller-manager kubectl; do
    [ -x "$OUT/$cmd" ] && continue
    log "building $cmd v$K8S_VERSION"
    go build -mod=mod -trimpath -ldflags "$LDFLAGS" -o "$OUT/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$OUT/$cmd.tmp" "$OUT/$cmd"
    log "$cmd built after $(( $(date +%s) - START ))s"
  done
  cp go.mod "$OUT/wrapper.go.mod"
)
"$OUT/etcd" --version >&2
"$OUT/kube-apiserver" --version >&2
touch "$OUT/.complete"
log "done in $(( $(date +%s) - START ))s"
echo "$OUT"
