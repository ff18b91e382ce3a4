#!/usr/bin/env bash
# check-pure-modules.sh — the decision layer (reconciler/core) takes what was observed and
# returns a value: it imports no client, no `Context`, no async runtime and does no I/O. Fails
# (listing the lines) when a module does; then checks the controller's import graph. Run by
# `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The decision layer is its own crate (reconciler-core): Cargo keeps the client and the
# runtime out of it (hack/check-plan-deps.sh checks its dependency tree); this scan keeps I/O
# and async out of its modules too.
PURE=(reconciler/core/src/*.rs)
FORBIDDEN='(kube::(Api|Client|client|runtime)|\bContext\b|tokio|reqwest|async fn|\.await|std::fs|std::net)'
bad=0
for f in "${PURE[@]}"; do
  [ -f "$f" ] || { echo "check-pure-modules: $f is missing" >&2; exit 1; }
  # Only the non-test part of each file, comments left out.
  if hits=$(awk '/^#\[cfg\(test\)\]/{exit} !/^[[:space:]]*\/\//{print FILENAME":"NR": "$0}' "$f" | grep -E "$FORBIDDEN"); then
    echo "check-pure-modules: $f must stay pure (no client, Context, runtime or I/O):" >&2
    echo "$hits" >&2
    bad=1
  fi
done
[ "$bad" = 0 ] || exit 1
echo "check-pure-modules: ${#PURE[@]} decision modules import no client, Context or runtime" >&2
python3 hack/import-graph.py
