#!/usr/bin/env bash
# sync-wit.sh — copy the WASI 0.2 WIT files that the wasmtime-wasi crate in Cargo.lock ships into
# synthesizer-sdk/wit/deps (the world Python and JavaScript components are built against).
# Run after a wasmtime upgrade; `--check` fails when the copy differs (run by hack/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
version="$(awk '/^name = "wasmtime-wasi"$/{getline; gsub(/"/,"",$3); print $3}' Cargo.lock)"
src="$(cargo metadata --format-version 1 --locked 2>/dev/null | python3 -c '
import json, sys
v = sys.argv[1]
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "wasmtime-wasi" and p["version"] == v:
        print(p["manifest_path"].rsplit("/", 1)[0]); break' "$version")"
[ -d "$src/src/p2/wit/deps" ] || { echo "sync-wit: no WIT in wasmtime-wasi $version ($src)" >&2; exit 1; }
if [ "${1:-}" = --check ]; then
  diff -r "$src/src/p2/wit/deps" synthesizer-sdk/wit/deps >/dev/null \
    || { echo "sync-wit: synthesizer-sdk/wit/deps differs from wasmtime-wasi $version: run hack/sync-wit.sh" >&2; exit 1; }
  echo "sync-wit: synthesizer-sdk/wit/deps matches wasmtime-wasi $version" >&2
else
  rm -rf synthesizer-sdk/wit/deps && cp -r "$src/src/p2/wit/deps" synthesizer-sdk/wit/deps
  echo "sync-wit: copied the WIT of wasmtime-wasi $version" >&2
fi
