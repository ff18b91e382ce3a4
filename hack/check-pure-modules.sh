#!/usr/bin/env bash
# check-pure-modules.sh — the controller's pure decision modules take what was observed and
# return a value: they import no client, no `Context`, no async runtime and do no I/O. Fails
# (listing the lines) when one does. Run by `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The same list as PURE in hack/import-graph.py, which checks that these import only each other.
PURE=(
  reconciler/controller/src/run/model.rs
  reconciler/controller/src/run/condition.rs
  reconciler/controller/src/run/composition/decide.rs
  reconciler/controller/src/run/composition/generation.rs
  reconciler/controller/src/run/composition/trigger.rs
  reconciler/controller/src/run/resources/fights.rs
  reconciler/controller/src/run/resources/migrate.rs
  reconciler/controller/src/run/resources/ownership.rs
  reconciler/controller/src/run/resources/record.rs
  reconciler/controller/src/run/resources/rollup.rs
)
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
