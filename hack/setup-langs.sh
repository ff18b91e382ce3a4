#!/usr/bin/env bash
# setup-langs.sh — the toolchains of the AssemblyScript, Python and TypeScript synthesizers, from
# the package registries at pinned versions, skipping what is already installed:
#   - Python: a venv in target/toolchains/python with synthesizer-sdk/python/requirements-build.txt
#     (componentize-py);
#   - npm: `npm ci` in samples/08-assemblyscript and samples/10-typescript (package-lock.json
#     pins assemblyscript, the WASI shim, assemblyscript-json, componentize-js, esbuild,
#     typescript), redone only when the lock file changed.
# Node.js (>= 18) and Python (>= 3.11 with venv) come from hack/setup.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
log() { echo "setup-langs: $*" >&2; }

command -v node >/dev/null && command -v npm >/dev/null || { log "node and npm are required (hack/setup.sh installs them)"; exit 1; }
node -e 'process.exit(+process.versions.node.split(".")[0] >= 18 ? 0 : 1)' || { log "Node.js >= 18 is required (found $(node --version))"; exit 1; }
python3 -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { log "Python >= 3.11 with the venv module is required"; exit 1; }

# ---- Python: componentize-py in a venv ----
PY="$ROOT/target/toolchains/python"
REQ="$ROOT/synthesizer-sdk/python/requirements-build.txt"
if ! cmp -s "$REQ" "$PY/.installed" 2>/dev/null; then
  log "installing $(grep -v '^#' "$REQ" | tr '\n' ' ')into $PY"
  rm -rf "$PY"
  python3 -m venv "$PY"
  "$PY/bin/pip" install -q --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$PY/.installed"
fi

# ---- npm: each sample's lock file ----
for dir in samples/08-assemblyscript samples/10-typescript; do
  if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.package-lock.installed" 2>/dev/null; then
    log "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
    cp "$dir/package-lock.json" "$dir/node_modules/.package-lock.installed"
  fi
done
log "ok (componentize-py $("$PY/bin/componentize-py" --version | awk '{print $2}'), node $(node --version))"
