#!/usr/bin/env bash
# helm-chart.sh — copy the static manifests the Helm chart shares with the kustomize base (CRDs,
# RBAC, the single-tenant overlay's RBAC, the onboarding template, the alert rules and the dashboard) into deploy/helm/enoki/files/. `--check` fails when
# the chart's copy differs (run by hack/test.sh), so the two installs cannot drift apart.
set -euo pipefail
cd "$(dirname "$0")/.."
F=deploy/helm/enoki/files
copy() {  # copy DEST-DIR
  mkdir -p "$1/crds/builtins"
  cp deploy/base/crds/*.yaml "$1/crds/"
  cp deploy/base/crds/builtins/*.yaml "$1/crds/builtins/"
  cp deploy/base/rbac.yaml deploy/base/rbac-tenants.yaml "$1/"
  cp deploy/overlays/single-tenant/rbac-single-tenant.yaml "$1/"
  mkdir -p "$1/eno-api/crds"
  cp deploy/components/eno-api/rbac-eno-api.yaml "$1/eno-api/"
  cp deploy/eno-api/crds/*.yaml "$1/eno-api/crds/"
  mkdir -p "$1/onboarding" "$1/monitoring"
  cp deploy/onboarding/tenant.yaml "$1/onboarding/"
  cp deploy/monitoring/rules.yaml deploy/monitoring/dashboard.json "$1/monitoring/"
}
if [ "${1:-}" = --check ]; then
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  copy "$tmp"
  diff -r "$tmp" "$F" >&2 || { echo "helm-chart: $F differs from deploy/base: run hack/helm-chart.sh" >&2; exit 1; }
  echo "helm-chart: $F matches deploy/base" >&2
else
  rm -rf "$F"; copy "$F"; echo "helm-chart: copied into $F" >&2
fi
