#!/usr/bin/env bash
# tools.sh — Go-built tools enoki's packaging uses, installed with `go install` from the Go
# module proxy into a per-machine cache outside the repository (like hack/k8s-testbin.sh):
#   helm   helm.sh/helm/v4/cmd/helm                          (the chart: lint, template, install)
#   crane  github.com/google/go-containerregistry/cmd/crane  (`make image` without a daemon)
# Prints the directory holding them on stdout (logs on stderr). Idempotent.
#   ENOKI_TOOLS_CACHE  cache root (default ${XDG_CACHE_HOME:-~/.cache}/enoki-tools)
#   TOOLS              which to install (default "helm crane")
set -euo pipefail
HELM_VERSION="${HELM_VERSION:-v4.3.1}"
CRANE_VERSION="${CRANE_VERSION:-v0.22.1}"
OUT="${ENOKI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enoki-tools}/helm-$HELM_VERSION-crane-$CRANE_VERSION"
log() { echo "tools: $*" >&2; }
command -v go >/dev/null || { log "no go toolchain on this machine (need Go >= 1.24)"; exit 1; }
mkdir -p "$OUT"
export CGO_ENABLED=0
for tool in ${TOOLS:-helm crane}; do
  [ -x "$OUT/$tool" ] && continue
  case "$tool" in
    helm) pkg="helm.sh/helm/v4/cmd/helm@$HELM_VERSION" ;;
    crane) pkg="github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION" ;;
    *) log "unknown tool $tool"; exit 1 ;;
  esac
  t0=$(date +%s)
  log "go install $pkg"
  GOBIN="$OUT" go install -trimpath -ldflags "-s -w" "$pkg" >&2
  log "$tool built in $(( $(date +%s) - t0 ))s"
done
echo "$OUT"
